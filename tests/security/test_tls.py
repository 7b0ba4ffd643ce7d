"""TLS on every port, against real processes: the hostile party here is whoever reads or answers
on the network between `sf`, the control plane, the agent executor, forgelet and the job.

The stack is the one a deployment runs: the control plane (in this process, on its own port), a
real `starforge-executor --kind agent` process and a real `forgelet` process (process runtime, a
CPU node), each configured with the test CA's certificate; with `mutual`, the executor and
forgelet also require a client certificate signed by that CA. `sf` (the real binary) and the
job's capsule reach the control plane through a TCP tap that records every byte, standing in for
an eavesdropper on the network.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import os
import pathlib
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
import yaml
from starforge_api.executor.v1 import executor_service_pb2 as ex_pb
from starforge_api.executor.v1 import executor_service_pb2_grpc as ex_grpc
from starforge_api.forgelet.v1 import forgelet_service_pb2 as fl_pb
from starforge_api.forgelet.v1 import forgelet_service_pb2_grpc as fl_grpc
from starforge_api.job.v1 import job_state_pb2 as st

from common import ids
from common.channel import aio_channel, bearer
from common.server import create_server
from common.tls import TlsConfig, server_ssl_context
from control import auth, embedded
from control.app import start_control
from control.blob_access import BlobAccess
from control.blobstore import BlobStore
from control.config import ControlConfig, FleetConfig, InventoryConfig
from control.db import migrate
from control.db.engine import Database
from control.envoy import Envoy
from control.http_ops import OpsServer
from tests.integration.console import EXECUTOR_TOKEN, REPO, Console, git, start_executor_process
from tests.integration.forgelet.fleet import (
    FLEET,
    FORGELET_TOKEN,
    ForgeletProcess,
    join_token,
    wait_nodes,
    write_executor_token,
)
from tests.integration.kuberay.test_fetch import HttpBlobs, init_container, make_request, pod_env, run
from tests.ports import free_port
from tests.security.tls_support import Pki, Tap, make_pki

pytestmark = [pytest.mark.slow]

SF = pathlib.Path(sys.executable).parent / "sf"
TRAIN = "#!/usr/bin/env bash\necho tls-ok from $FORGE_JOB_ID\n"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def sf(
    root: pathlib.Path, *args: str, cwd: pathlib.Path | None = None, **client: Any
) -> subprocess.CompletedProcess[str]:
    """The real `sf` with a client config (in `root`) holding `client` (console, token, ca_file, ...)."""
    path = root / f"client-{hashlib.sha256(json.dumps(client, sort_keys=True).encode()).hexdigest()[:12]}.yaml"
    path.write_text(yaml.safe_dump(client))
    env = {k: v for k, v in os.environ.items() if not k.startswith("STARFORGE_")}
    env["STARFORGE_CLIENT_CONFIG"] = str(path)
    return subprocess.run([str(SF), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)


@dataclass
class Stack:
    console: Console
    tap: Tap
    forgelet: ForgeletProcess
    pki: Pki
    ingest_tap: Tap | None = None  # in front of the ingest port, when the console has one

    def sf(self, *args: str, cwd: pathlib.Path | None = None, **client: Any) -> subprocess.CompletedProcess[str]:
        return sf(self.console.root, *args, cwd=cwd, **client)

    async def sf_async(
        self, *args: str, cwd: pathlib.Path | None = None, **client: Any
    ) -> subprocess.CompletedProcess[str]:
        return await asyncio.to_thread(self.sf, *args, cwd=cwd, **client)

    def trusted(self) -> dict[str, Any]:
        """The client config of a user who has the deployment's CA."""
        return {"console": self.tap.address, "token": self.console.token, "ca_file": str(self.pki.ca)}


def server_tls(pki: Pki, *, mutual: bool) -> dict[str, str]:
    tls = {"cert_file": str(pki.leaf.cert), "key_file": str(pki.leaf.key), "ca_file": str(pki.ca)}
    if mutual:
        tls["client_ca_file"] = str(pki.ca)
    return tls


def client_tls(pki: Pki, *, mutual: bool) -> dict[str, str]:
    tls = {"ca_file": str(pki.ca)}
    if mutual:
        tls |= {"client_cert_file": str(pki.leaf.cert), "client_key_file": str(pki.leaf.key)}
    return tls


def executor_config(root: pathlib.Path, pki: Pki, control: str, *, mutual: bool) -> pathlib.Path:
    path = root / "executor.yaml"
    doc = {
        "token": EXECUTOR_TOKEN,
        "tls": {k: v for k, v in server_tls(pki, mutual=mutual).items() if k != "ca_file"},
        "agent": {
            "fleet": FLEET,
            "control_address": control,
            # an executor token, written once the console is up (the file is read at each use)
            "control_token_file": str(root / "agent-token"),
            "forgelet_token": FORGELET_TOKEN,
            "runtime": "process",
            "state_dir": str(root / "agent"),
            "nodes_refresh_seconds": 0.5,
            "tls": client_tls(pki, mutual=mutual),
        },
    }
    path.write_text(yaml.safe_dump(doc))
    return path


@contextlib.asynccontextmanager
async def tls_stack(root: pathlib.Path, pki: Pki, *, mutual: bool, ingest_port: bool = False) -> AsyncIterator[Stack]:
    """Control plane, agent executor process and one forgelet process, all on TLS (module docstring).
    `ingest_port`: runs report on the console's ingest port (`ingest_listen`), behind a tap of its own."""
    root.mkdir(parents=True, exist_ok=True)
    control = f"127.0.0.1:{free_port()}"
    tap = Tap(("127.0.0.1", int(control.rsplit(":", 1)[1])))
    ingest = f"127.0.0.1:{free_port()}" if ingest_port else ""
    ingest_tap = Tap(("127.0.0.1", int(ingest.rsplit(":", 1)[1]))) if ingest else None
    proc, executor_address = start_executor_process(
        root, executor_config(root, pki, control, mutual=mutual), kind="agent"
    )
    control_tls: dict[str, Any] = client_tls(pki, mutual=mutual) | {
        "cert_file": str(pki.leaf.cert),
        "key_file": str(pki.leaf.key),
    }
    cfg = ControlConfig(
        listen=control,
        public_address=tap.address,  # jobs and the executor's blob fetches cross the tap too
        state_dir=root / "console",
        capsule_dir=embedded.ensure_capsule(),
        bootstrap_admin="admin",
        default_images={"custom": "host"},
        scheduler_interval_seconds=0.1,
        reconcile_interval_seconds=0.3,
        stop_grace_seconds=3,
        fleets=[
            FleetConfig(
                name=FLEET,
                kind="agent",
                address=executor_address,
                inventory=[InventoryConfig(series="cpu", nodes=1, gpus_per_node=0, slots=2)],
                token=EXECUTOR_TOKEN,
            )
        ],
    )
    cfg = dataclasses.replace(
        cfg,
        tls=TlsConfig(**control_tls),
        ingest_listen=ingest,
        public_ingest_address=ingest_tap.address if ingest_tap else "",
    )
    app = await start_control(cfg)
    token = (cfg.resolved_state_dir / "admin-token").read_text().strip()
    channel = aio_channel(control, grpc.ssl_channel_credentials(pki.ca.read_bytes()))
    c = Console(app, token, root, proc, executor_address, channel, extra={"user": "admin"})
    await write_executor_token(c, root / "agent-token", FLEET)
    node = ForgeletProcess("n1", root / "n1", control, await join_token(c, "n1", FLEET), runtime="process")
    node.write_config(tls=server_tls(pki, mutual=mutual) | client_tls(pki, mutual=False))
    try:
        node.start()
        await wait_nodes(c, ["n1"])
        yield Stack(c, tap, node, pki, ingest_tap)
    finally:
        node.stop()
        await channel.close(None)
        await app.stop(0)
        embedded.stop_process(proc)
        tap.close()
        if ingest_tap is not None:
            ingest_tap.close()


async def make_lab(s: Stack) -> pathlib.Path:
    """A git lab with one custom experiment, made with `sf init` and `sf new` over TLS."""
    lab = s.console.root / "lab"
    if lab.exists():
        return lab
    for args, cwd in ((("init", str(lab), "--name", "lab"), None), (("new", "exp", "--method", "custom/custom"), lab)):
        r = await s.sf_async(*args, cwd=cwd, **s.trusted())
        assert r.returncode == 0, r.stdout + r.stderr
    git(lab, "init", "-q")
    exp = lab / "experiments" / "exp"
    (exp / "train.sh").write_text(TRAIN)
    (exp / "train.sh").chmod(0o755)
    (exp / "config.yaml").write_text(yaml.safe_dump({"image": "host", "observability": "platform"}))
    git(lab, "add", "-A")
    git(lab, "commit", "-qm", "lab")
    return lab


async def run_job_over_tls(s: Stack) -> str:
    """Submit through `sf` with the CA in its client config and follow the job to its end."""
    lab = await make_lab(s)
    r = await s.sf_async("submit", "exp", "--profile", "cpu", "--follow", cwd=lab, **s.trusted())
    assert r.returncode == 0, r.stdout + r.stderr
    found = re.search(r"submitted job (\S+)", r.stdout)
    assert found, r.stdout
    job = await s.console.wait(found.group(1), st.JOB_STATE_SUCCEEDED, timeout=120)
    assert job.attempts[-1].node == "n1", job
    assert "tls-ok from" in r.stdout, r.stdout
    return found.group(1)


async def test_job_runs_over_tls_and_nothing_crosses_in_plain_text(tmp_path: pathlib.Path, pki: Pki) -> None:
    async with tls_stack(tmp_path, pki, mutual=False) as s:
        await run_job_over_tls(s)
        seen = s.tap.bytes_seen()
        # sf's calls, the runner's reports and the node's blob downloads all crossed the tap ...
        assert len(seen) > 100_000, len(seen)
        # ... and none of it is readable: no token, no header name, no log line of the job
        assert s.console.token.encode() not in seen
        assert b"Bearer" not in seen and b"authorization" not in seen
        assert b"tls-ok from" not in seen


async def test_reports_on_the_ingest_port_cross_in_tls_only(tmp_path: pathlib.Path, pki: Pki) -> None:
    """The runner's reports go to the ingest port (`ingest_listen`), which serves the same TLS."""
    async with tls_stack(tmp_path, pki, mutual=False, ingest_port=True) as s:
        await run_job_over_tls(s)
        assert s.ingest_tap is not None
        seen = s.ingest_tap.bytes_seen()
        assert len(seen) > 1_000, len(seen)  # the runner's reports crossed it ...
        assert b"tls-ok from" not in seen and b"authorization" not in seen  # ... unreadable
        async with aio_channel(s.ingest_tap.address) as plain:  # and it refuses plaintext
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await plain.unary_unary("/starforge.ingest.v1.IngestService/GetCursor", lambda b: b, lambda b: b)(
                    b"", timeout=10
                )
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_plaintext_and_untrusted_clients_are_refused(tmp_path: pathlib.Path, pki: Pki) -> None:
    async with tls_stack(tmp_path, pki, mutual=False) as s:
        who = ("whoami",)
        trusted = await s.sf_async(*who, **s.trusted())
        assert trusted.returncode == 0, trusted.stderr

        plaintext = await s.sf_async(*who, console=s.tap.address, token=s.console.token)
        assert plaintext.returncode == 5, plaintext.stderr
        assert "cannot reach the console" in plaintext.stderr

        rogue = await s.sf_async(*who, console=s.tap.address, token=s.console.token, ca_file=str(pki.rogue_ca))
        assert rogue.returncode == 5, rogue.stderr
        assert "presented a TLS certificate that ca_file" in rogue.stderr, rogue.stderr
        assert "does not verify" in rogue.stderr and "set ca_file" in rogue.stderr

        # The control plane still serves the trusted client.
        assert (await s.sf_async(*who, **s.trusted())).returncode == 0


def test_sf_refuses_plaintext_to_a_remote_console_before_sending(tmp_path: pathlib.Path) -> None:
    # 192.0.2.1 (TEST-NET-1) is never this machine: sf refuses before any packet leaves.
    r = sf(tmp_path, "whoami", console="192.0.2.1:7070", token="sfp_secret")
    assert r.returncode == 2, r.stderr
    assert "TLS is off" in r.stderr and "plain text" in r.stderr and "nothing was sent" in r.stderr
    # Loopback plaintext (the embedded console) is allowed: this one gets as far as the network.
    local = sf(tmp_path, "whoami", console=f"127.0.0.1:{free_port()}", token="sfp_secret")
    assert local.returncode == 5 and "cannot reach the console" in local.stderr, local.stderr


async def test_the_tap_reads_a_token_sent_in_plain_text(tmp_path: pathlib.Path) -> None:
    """The eavesdropping check above can fail: over plaintext the tap reads the token."""
    server, port, _ = await create_server("127.0.0.1:0", [])
    await server.start()
    tap = Tap(("127.0.0.1", port))
    try:
        async with aio_channel(tap.address) as ch:
            stub = fl_grpc.ForgeletServiceStub(ch)
            with pytest.raises(grpc.aio.AioRpcError):  # UNIMPLEMENTED: the request did arrive
                await stub.GetNode(fl_pb.GetNodeRequest(), metadata=bearer("sfp_plaintext_marker"), timeout=10)
        assert b"sfp_plaintext_marker" in tap.bytes_seen()
    finally:
        tap.close()
        await server.stop(0)


async def test_mutual_tls_runs_jobs_and_refuses_callers_without_a_client_certificate(
    tmp_path: pathlib.Path, pki: Pki
) -> None:
    async with tls_stack(tmp_path, pki, mutual=True) as s:
        await run_job_over_tls(s)
        ex_req = ex_pb.DescribeCapabilitiesRequest()
        fl_req = fl_pb.GetNodeRequest()

        async def executor(creds: grpc.ChannelCredentials) -> Any:
            async with aio_channel(s.console.executor_address, creds) as ch:
                stub = ex_grpc.ExecutorServiceStub(ch)
                return await stub.DescribeCapabilities(ex_req, metadata=bearer(EXECUTOR_TOKEN), timeout=10)

        async def forgelet(creds: grpc.ChannelCredentials) -> Any:
            async with aio_channel(s.forgelet.address, creds) as ch:
                stub = fl_grpc.ForgeletServiceStub(ch)
                return await stub.GetNode(fl_req, metadata=bearer(FORGELET_TOKEN), timeout=10)

        no_cert = grpc.ssl_channel_credentials(pki.ca.read_bytes())
        rogue_cert = grpc.ssl_channel_credentials(
            pki.ca.read_bytes(), pki.rogue_leaf.key.read_bytes(), pki.rogue_leaf.cert.read_bytes()
        )
        for call in (executor, forgelet):
            for creds in (no_cert, rogue_cert):
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await call(creds)
                assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            with pytest.raises(grpc.aio.AioRpcError):
                async with aio_channel(s.forgelet.address) as plain:  # no TLS at all
                    await fl_grpc.ForgeletServiceStub(plain).GetNode(fl_req, timeout=10)
        # The node holding the real client certificate still answers, and still runs work.
        good = grpc.ssl_channel_credentials(pki.ca.read_bytes(), pki.leaf.key.read_bytes(), pki.leaf.cert.read_bytes())
        assert (await forgelet(good)).node.name == "n1"
        assert (await executor(good)).kind == "agent"
        await run_job_over_tls(s)


def run_cli(args: list[str], config: dict[str, Any], root: pathlib.Path) -> subprocess.CompletedProcess[str]:
    path = root / f"{args[0].rsplit('.', 1)[-1]}.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {k: v for k, v in os.environ.items() if not k.startswith("STARFORGE_")}
    return subprocess.run(
        [sys.executable, "-m", *args, "--config", str(path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_non_loopback_listen_without_tls_is_refused_at_start(tmp_path: pathlib.Path, pki: Pki) -> None:
    state = str(tmp_path / "state")
    control = run_cli(["control.main"], {"listen": "0.0.0.0:0", "state_dir": state}, tmp_path)
    executor = run_cli(
        ["executor_svc.main", "--kind", "local"],
        {"listen": "0.0.0.0:0", "local": {"runtime": "process", "state_dir": state}},
        tmp_path,
    )
    forgelet = run_cli(
        ["forgelet.main", "serve"],
        {
            "fleet": "f",
            "listen": "0.0.0.0:0",
            "executor_token": "t",
            "discovery": "config",
            "local": {"runtime": "process", "state_dir": state},
        },
        tmp_path,
    )
    for name, r in (("control", control), ("executor", executor), ("forgelet", forgelet)):
        assert r.returncode == 2, f"{name}: {r.stdout}{r.stderr}"
        assert "listen: 0.0.0.0:0 is not a loopback address and TLS is off" in r.stderr, f"{name}: {r.stderr}"
    # Dialing out in plaintext off loopback is refused the same way (the forgelet's control plane).
    dial = run_cli(
        ["forgelet.main", "serve"],
        {"fleet": "f", "control_address": "192.0.2.1:7070", "executor_token": "t"},
        tmp_path,
    )
    assert dial.returncode == 2 and "control_address: 192.0.2.1:7070 is not a loopback address" in dial.stderr
    # The explicit setting allows it: the executor serves (then is stopped by its PID).
    config = tmp_path / "plaintext.yaml"
    local = {"runtime": "process", "state_dir": state}
    config.write_text(
        yaml.safe_dump({"listen": "0.0.0.0:0", "token": EXECUTOR_TOKEN, "tls": {"plaintext": True}, "local": local})
    )
    ready = tmp_path / "plaintext.ready"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "executor_svc.main",
            "--kind",
            "local",
            "--config",
            str(config),
            "--ready-file",
            str(ready),
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the plaintext executor did not start"
            time.sleep(0.05)
        assert json.loads(ready.read_text())["address"].startswith("0.0.0.0:")
    finally:
        embedded.stop_process(proc)


def test_envoy_serves_tls_and_speaks_tls_upstream(tmp_path: pathlib.Path, pki: Pki) -> None:
    tls = TlsConfig(cert_file=str(pki.leaf.cert), key_file=str(pki.leaf.key), ca_file=str(pki.ca))
    front = Envoy(tmp_path, "127.0.0.1:0", "127.0.0.1:7070", "127.0.0.1:8081", tls=tls)
    front.validate()
    doc = yaml.safe_load(front.config.read_text())
    chain = doc["static_resources"]["listeners"][0]["filter_chains"][0]
    assert chain["transport_socket"]["name"] == "envoy.transport_sockets.tls"
    assert all(
        c["transport_socket"]["name"] == "envoy.transport_sockets.tls" for c in doc["static_resources"]["clusters"]
    )


@contextlib.asynccontextmanager
async def https_blobs(root: pathlib.Path, pki: Pki) -> AsyncIterator[HttpBlobs]:
    """The control plane's HTTP blob endpoint serving https with the test CA's certificate."""
    db = Database(f"sqlite:///{root / 'ledger.db'}")
    migrate.upgrade(db.engine)
    job_id = ids.new_job_id()

    def run_token(s: Any) -> str:
        auth.create_user(s, "tester")
        token, _ = auth.issue_token(s, "tester", "run", job_id=job_id, attempt_id=ids.attempt_id(job_id, 1))
        return token

    blobs = HttpBlobs("", job_id, db.run_sync(run_token), BlobStore(root / "blobs"))

    async def run_may_read(attempt: str, digest: str) -> bool:
        return attempt == ids.attempt_id(job_id, 1) and digest in blobs.allowed

    tls = TlsConfig(cert_file=str(pki.leaf.cert), key_file=str(pki.leaf.key), ca_file=str(pki.ca))
    ops = OpsServer(
        "127.0.0.1:0",
        blobs.store,
        auth.TokenVerifier(db),
        BlobAccess(db, run_may_read),
        asyncio.get_running_loop(),
        ssl_context=server_ssl_context(tls),
    )
    ops.start()
    blobs.url = f"https://127.0.0.1:{ops.port}"
    try:
        yield blobs
    finally:
        ops.stop()
        db.close()


async def test_kuberay_pods_fetch_over_https_verified_with_the_control_planes_ca(
    tmp_path: pathlib.Path, pki: Pki
) -> None:
    async with https_blobs(tmp_path, pki) as blobs:
        req = make_request(blobs)
        req.blob_source.ca_pem = pki.ca.read_text()
        fetch = init_container(req)
        code, out, err = await run(fetch["command"], pod_env(fetch, tmp_path / "good"))
        assert code == 0, err
        assert "fetched" in out

        # A pod told to trust another CA (someone answering in the control plane's place) sends
        # no token: the handshake fails first.
        req.blob_source.ca_pem = pki.rogue_ca.read_text()
        fetch = init_container(req)
        code, _, err = await run(fetch["command"], pod_env(fetch, tmp_path / "rogue"))
        assert code == 1, err
        assert "CERTIFICATE_VERIFY_FAILED" in err, err
        assert "retrying" not in err, err  # another CA stays another CA: refused at the first try

        # Plain http to the https port gets nothing.
        req.blob_source.ca_pem = ""
        req.blob_source.http_url = blobs.url.replace("https://", "http://")
        fetch = init_container(req)
        code, _, err = await run(fetch["command"], pod_env(fetch, tmp_path / "plain"))
        assert code == 1, err
