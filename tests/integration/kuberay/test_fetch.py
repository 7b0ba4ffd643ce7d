"""The in-pod fetch script, run for real against the control plane's real HTTP blob endpoint.

The server is control.http_ops.OpsServer with a real BlobStore and a real run token from a real
(SQLite) ledger, which only lets the run read its own blobs. The script runs exactly as the init
container would: the command and environment are taken from the RayJob the builder makes, with
the pod's /forge paths moved under a temp dir (and Kubernetes' "$$(" escape undone, as the
kubelet does). Then the real bootstrap.sh runs with the head container's environment and must
accept the layout: that is what makes the capsule work on a real cluster.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import pathlib
import stat
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from starforge_api.executor.v1 import launch_request_pb2 as lr_pb

from common import ids
from control import auth
from control.blob_access import BlobAccess
from control.blobstore import BlobStore
from control.db import migrate
from control.db.engine import Database
from control.http_ops import OpsServer
from executor_svc.kuberay import builder
from tests.integration.blob_server import BlobServer
from tests.integration.executors.launch_requests import Bundle, launch_request, verified_capsule
from tests.unit.kuberay.requests import config, pool

RUNNER = 'import os\nprint("RUNNER OK", os.environ["FORGE_ATTEMPT_ID"], os.getcwd() != "")\n'
WORKSPACE = {
    "train.sh": (b"#!/bin/sh\necho train\n", True),
    "configs/a.yaml": (b"lr: 0.1\n", False),
    "configs/copy-of-a.yaml": (b"lr: 0.1\n", False),
    "data/big.bin": (os.urandom(3 << 20), False),
}


@dataclass
class HttpBlobs:
    """The control plane's HTTP blob endpoint, with one run's token."""

    url: str
    job_id: str
    token: str
    store: BlobStore
    allowed: set[str] = field(default_factory=set)

    def put(self, data: bytes) -> str:
        digest = self.store.put_bytes(data)
        self.allowed.add(digest)
        return digest


@pytest.fixture
async def http_blobs(tmp_path: pathlib.Path) -> AsyncIterator[HttpBlobs]:
    db = Database(f"sqlite:///{tmp_path / 'ledger.db'}")
    migrate.upgrade(db.engine)
    job_id = ids.new_job_id()

    def run_token(s: Any) -> str:
        auth.create_user(s, "tester")
        token, _ = auth.issue_token(s, "tester", "run", job_id=job_id, attempt_id=ids.attempt_id(job_id, 1))
        return token

    blobs = HttpBlobs("", job_id, db.run_sync(run_token), BlobStore(tmp_path / "blobs"))

    async def run_may_read(attempt: str, digest: str) -> bool:
        return attempt == ids.attempt_id(job_id, 1) and digest in blobs.allowed

    ops = OpsServer(
        "127.0.0.1:0", blobs.store, auth.TokenVerifier(db), BlobAccess(db, run_may_read), asyncio.get_running_loop()
    )
    ops.start()
    blobs.url = f"http://127.0.0.1:{ops.port}"
    try:
        yield blobs
    finally:
        ops.stop()
        db.close()


def make_request(blobs: HttpBlobs, workspace: Mapping[str, tuple[bytes, bool]] = WORKSPACE) -> lr_pb.LaunchRequest:
    attempt_id = ids.attempt_id(blobs.job_id, 1)
    bundle: Bundle = verified_capsule(RUNNER, dict(workspace), job_id=blobs.job_id, attempt_id=attempt_id)
    for data, _ in [*bundle.capsule.values(), *bundle.workspace.values()]:
        blobs.put(data)
    req = launch_request(BlobServer("unused:0", blobs.token, blobs.store), bundle, job_id=blobs.job_id, image="img")
    req.blob_source.http_url = blobs.url
    return req


def pod_env(container: dict[str, Any], root: pathlib.Path) -> dict[str, str]:
    """The container's environment as the kubelet gives it, its /forge paths moved under `root`."""
    env = {"PATH": os.environ["PATH"]}
    for e in container["env"]:
        value = e["value"].replace("$$(", "$(")
        env[e["name"]] = value.replace("/forge/", f"{root}/forge/")
    return env


async def run(cmd: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *cmd, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def init_container(req: lr_pb.LaunchRequest, role: str = "head") -> dict[str, Any]:
    m = builder.build(req, config()).manifest
    cluster = m["spec"]["rayClusterSpec"]
    group = cluster["headGroupSpec"] if role == "head" else cluster["workerGroupSpecs"][0]
    return dict(group["template"]["spec"]["initContainers"][0])


def digest(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_fetch_lays_out_the_capsule_and_bootstrap_accepts_it(
    http_blobs: HttpBlobs, tmp_path: pathlib.Path
) -> None:
    req = make_request(http_blobs)
    ds = req.datasets.add(name="train", ref="tester/train@1")
    data = b'{"prompt": "hi"}\n'
    ds.manifest.files.add(path="part-0.jsonl", sha256=http_blobs.put(data), size=len(data))
    fetch = init_container(req)
    code, out, err = await run(fetch["command"], pod_env(fetch, tmp_path))
    assert code == 0, err
    assert "fetched 8 files" in out  # capsule.json, bootstrap.sh, the runner, 4 workspace files, 1 dataset file
    forge = tmp_path / "forge"
    for f in req.capsule.files:
        p = forge / "capsule" / f.path
        assert digest(p) == f.sha256
        assert bool(p.stat().st_mode & stat.S_IXUSR) == f.executable
    for path, (content, executable) in WORKSPACE.items():
        p = forge / "workspace" / path
        assert p.read_bytes() == content
        assert stat.S_IMODE(p.stat().st_mode) == (0o755 if executable else 0o644)
    assert (forge / "datasets" / "train" / "part-0.jsonl").read_bytes() == data
    assert not [p for p in forge.rglob(".fetch-*")], "no temporary files left"
    # the head's run token, for the runner only: in the scratch dir, 0600, never in the main env
    token_file = forge / "scratch" / ".forge-ingest-token"
    assert token_file.read_text() == req.ingest.token
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600

    main = builder.build(req, config()).manifest["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    env = pod_env(main["containers"][0], tmp_path)
    assert "FORGE_INGEST_TOKEN" not in env
    # The RayJob's entrypoint, `sh /forge/capsule/bootstrap.sh`, with the same path move.
    code, out, err = await run(builder.ENTRYPOINT.replace("/forge/", f"{tmp_path}/forge/").split(), env)
    assert code == 0, err
    assert f"RUNNER OK {req.attempt_id}" in out


async def test_a_blob_that_does_not_match_its_digest_fails_the_fetch(
    http_blobs: HttpBlobs, tmp_path: pathlib.Path
) -> None:
    req = make_request(http_blobs)
    wrong = WORKSPACE["train.sh"][0]
    path = http_blobs.store.path(hashlib.sha256(wrong).hexdigest())
    path.chmod(0o644)
    path.write_bytes(b"#!/bin/sh\nrm -rf /\n")  # the store now serves other content under that digest
    fetch = init_container(req)
    code, _, err = await run(fetch["command"], pod_env(fetch, tmp_path))
    assert code == 97, err
    assert "starforge: capsule fetch failed: workspace/train.sh: expected sha256 " in err
    assert not (tmp_path / "forge" / "workspace" / "train.sh").exists()


async def test_wrong_capsule_digest_fails_before_anything_else(http_blobs: HttpBlobs, tmp_path: pathlib.Path) -> None:
    req = make_request(http_blobs)
    fetch = init_container(req)
    env = pod_env(fetch, tmp_path)
    env["FORGE_CAPSULE_SHA256"] = "0" * 64  # not this run's blob: the server answers 403
    code, _, err = await run(fetch["command"], env)
    assert code == 1
    assert "capsule/capsule.json: GET" in err
    assert "answered 403" in err


async def test_a_refused_token_says_so(http_blobs: HttpBlobs, tmp_path: pathlib.Path) -> None:
    req = make_request(http_blobs)
    fetch = init_container(req)
    env = pod_env(fetch, tmp_path)
    env["FORGE_BLOB_TOKEN"] = "sfr_0000000000_not-a-real-token-at-all-xx"
    code, _, err = await run(fetch["command"], env)
    assert code == 1
    assert "answered 401" in err
    assert "token is not valid" in err


async def test_workers_fetch_the_same_files(http_blobs: HttpBlobs, tmp_path: pathlib.Path) -> None:
    req = make_request(http_blobs, {"train.sh": (b"#!/bin/sh\n", True)})
    req.ClearField("pools")
    req.pools.append(pool("h200", 8, nodes=2))
    fetch = init_container(req, role="worker")
    code, _, err = await run(fetch["command"], pod_env(fetch, tmp_path))
    assert code == 0, err
    assert (tmp_path / "forge" / "workspace" / "train.sh").stat().st_mode & stat.S_IXUSR
