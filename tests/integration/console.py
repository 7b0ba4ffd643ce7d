"""A live console for integration tests: the control plane (in this process, on a free port) and a
real `starforge-executor --kind local` process, as `sf up` runs them. Plus helpers to pack a lab,
submit, and wait for states over the real gRPC API.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
import yaml
from starforge_api.catalog.v1 import catalog_service_pb2 as cat
from starforge_api.catalog.v1 import catalog_service_pb2_grpc as cat_grpc
from starforge_api.control.v1 import blob_service_pb2 as blob
from starforge_api.control.v1 import blob_service_pb2_grpc as blob_grpc
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.control.v1 import control_service_pb2_grpc as ctl_grpc
from starforge_api.job.v1 import job_pb2, job_spec_pb2, job_state_pb2, workspace_pb2

from common.channel import aio_channel, bearer
from control import embedded
from control.app import ControlApp, start_control
from control.config import ControlConfig, FleetConfig, InventoryConfig
from tests.db import create_pg_database, drop_pg_database

REPO = pathlib.Path(__file__).resolve().parents[2]

# The ledger every `console()` of the running test uses unless it names one: "sqlite" (the
# embedded default) or "postgres" (a fresh database per console). Set by the `ledger` fixture,
# which the console-level test modules parametrize over both.
_ledger_backend = "sqlite"


@contextlib.contextmanager
def ledger_backend(name: str) -> Iterator[None]:
    """Consoles started inside this block keep their ledger on `name` ("sqlite" or "postgres")."""
    global _ledger_backend  # noqa: PLW0603 - one test at a time sets it, through the fixture
    if name not in ("sqlite", "postgres"):
        raise ValueError(f"unknown ledger backend {name!r}")
    previous, _ledger_backend = _ledger_backend, name
    try:
        yield
    finally:
        _ledger_backend = previous


@contextlib.contextmanager
def _ledger_url(explicit: str) -> Iterator[str]:
    """The console's database URL: `explicit`, else SQLite in its state dir (""), else a fresh
    PostgreSQL database dropped when the console is gone."""
    if explicit or _ledger_backend == "sqlite":
        yield explicit
        return
    url = create_pg_database()
    try:
        yield url
    finally:
        drop_pg_database(url)


@dataclass
class Console:
    app: ControlApp
    token: str
    root: pathlib.Path
    executor: subprocess.Popen[bytes] | None
    executor_address: str
    channel: grpc.aio.Channel
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return self.app.address

    @property
    def md(self) -> tuple[tuple[str, str], ...]:
        return bearer(self.token)

    @property
    def jobs(self) -> ctl_grpc.ControlServiceStub:
        return ctl_grpc.ControlServiceStub(self.channel)

    @property
    def blobs(self) -> blob_grpc.BlobServiceStub:
        return blob_grpc.BlobServiceStub(self.channel)

    async def lock(self, method: str = "custom/custom") -> job_spec_pb2.RecipeLock:
        r = await cat_grpc.CatalogServiceStub(self.channel).ResolveLock(
            cat.ResolveLockRequest(method=method), metadata=self.md
        )
        lock: job_spec_pb2.RecipeLock = r.lock
        return lock

    async def upload(self, files: Mapping[str, bytes], executable: set[str]) -> workspace_pb2.WorkspaceManifest:
        manifest = workspace_pb2.WorkspaceManifest()
        for path in sorted(files):
            data = files[path]
            manifest.files.add(
                path=path, sha256=hashlib.sha256(data).hexdigest(), size=len(data), executable=path in executable
            )

        async def chunks() -> AsyncIterator[blob.UploadBlobsRequest]:
            for f in manifest.files:
                yield blob.UploadBlobsRequest(digest=f.sha256, size=f.size, data=files[f.path], finish=True)

        await self.blobs.UploadBlobs(chunks(), metadata=self.md)
        return manifest

    async def submit_custom(
        self,
        train_sh: str,
        *,
        extra_files: Mapping[str, bytes] | None = None,
        config: Mapping[str, Any] | None = None,
        experiment: str = "exp",
        **spec_fields: Any,
    ) -> job_pb2.Job:
        spec = await self.custom_spec(
            train_sh, extra_files=extra_files, config=config, experiment=experiment, **spec_fields
        )
        r = await self.jobs.SubmitJob(ctl.SubmitJobRequest(spec=spec), metadata=self.md)
        job: job_pb2.Job = r.job
        return job

    async def custom_spec(
        self,
        train_sh: str,
        *,
        extra_files: Mapping[str, bytes] | None = None,
        config: Mapping[str, Any] | None = None,
        experiment: str = "exp",
        **spec_fields: Any,
    ) -> job_spec_pb2.JobSpec:
        """The spec `submit_custom` submits, its workspace uploaded: for a test that sends it
        itself (with a request id, say)."""
        files = {f"experiments/{experiment}/train.sh": train_sh.encode(), **(extra_files or {})}
        manifest = await self.upload(files, {f"experiments/{experiment}/train.sh"})
        cfg = {"image": "host", "observability": "platform", **(config or {})}
        return job_spec_pb2.JobSpec(
            api_version="forge/v2",
            project=f"@{self.extra.get('user', 'admin')}/lab",
            experiment=experiment,
            method="custom/custom",
            recipe_lock=await self.lock(),
            config_json=json.dumps(cfg),
            workspace=manifest,
            **spec_fields,
        )

    async def get(self, job_id: str) -> job_pb2.Job:
        job: job_pb2.Job = (await self.jobs.GetJob(ctl.GetJobRequest(job_id=job_id), metadata=self.md)).job
        return job

    async def wait(self, job_id: str, *states: int, timeout: float = 60.0) -> job_pb2.Job:
        deadline = time.monotonic() + timeout
        job = await self.get(job_id)
        while job.state not in states:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"job {job_id} is {job_state_pb2.JobState.Name(job.state)}, wanted {states}: {job}"
                )
            await asyncio.sleep(0.1)
            job = await self.get(job_id)
        return job

    def sf(
        self, *args: str, cwd: pathlib.Path | None = None, check: bool = True, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """Run the real `sf` binary against this console (as a user would)."""
        env = dict(
            os.environ,
            STARFORGE_CONSOLE=self.address,
            STARFORGE_TOKEN=self.token,
            STARFORGE_CLIENT_CONFIG=str(self.root / "client.yaml"),
        )
        r = subprocess.run(
            [str(pathlib.Path(sys.executable).parent / "sf"), *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and r.returncode != 0:
            raise AssertionError(f"sf {' '.join(args)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
        return r

    async def sf_async(
        self, *args: str, cwd: pathlib.Path | None = None, check: bool = True, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """`sf` in a thread, so the in-process control plane keeps serving while it runs."""
        return await asyncio.to_thread(self.sf, *args, cwd=cwd, check=check, timeout=timeout)

    async def lab(
        self,
        experiment: str = "exp",
        train_sh: str = "#!/usr/bin/env bash\necho hello from train.sh\n",
        config: Mapping[str, Any] | None = None,
        files: Mapping[str, str] | None = None,
        method: str = "custom/custom",
    ) -> pathlib.Path:
        """A git lab made with `sf init` and `sf new`, with train.sh/config.yaml/extra files committed."""
        lab = self.root / f"lab-{experiment}"
        await self.sf_async("init", str(lab), "--name", "lab")
        git(lab, "init", "-q")
        await self.sf_async("new", experiment, "--method", method, cwd=lab)
        exp = lab / "experiments" / experiment
        if method == "custom/custom":
            (exp / "train.sh").write_text(train_sh)
            (exp / "train.sh").chmod(0o755)
            cfg = {"image": "host", "observability": "platform", **(config or {})}
        else:  # keep the defaults `sf new` wrote, change only what the test asks
            cfg = yaml.safe_load((exp / "config.yaml").read_text()) or {}
            cfg.update(config or {})
        (exp / "config.yaml").write_text(yaml.safe_dump(cfg))
        for rel, text in (files or {}).items():
            (lab / rel).parent.mkdir(parents=True, exist_ok=True)
            (lab / rel).write_text(text)
        git(lab, "add", "-A")
        git(lab, "commit", "-qm", "lab")
        return lab

    async def logs(self, job_id: str) -> list[str]:
        out: list[str] = []
        async for r in self.jobs.StreamJobLogs(ctl.StreamJobLogsRequest(job_id=job_id), metadata=self.md):
            out.extend(line.text for line in r.lines)
        return out


def git(cwd: pathlib.Path, *args: str) -> None:
    env = dict(
        os.environ,
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@starforge.invalid",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@starforge.invalid",
    )
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


# The bearer token every test executor service requires (and the console's fleet presents).
EXECUTOR_TOKEN = "test-executor-token-0123456789abcdef"


def executor_yaml(
    root: pathlib.Path, runtime: str, local: Mapping[str, Any] | None = None, *, kind: str = "local"
) -> pathlib.Path:
    """The executor's config file: for `local`, the runtime + a CPU inventory (+ `local` keys);
    for other kinds, `local` is the kind's whole section."""
    path = root / "executor.yaml"
    if kind == "local":
        section = {
            "runtime": runtime,
            "state_dir": str(root / "executor"),
            "inventory": [{"series": "cpu", "gpus": 0, "slots": 4}],
            **(local or {}),
        }
    else:
        section = dict(local or {})
    path.write_text(yaml.safe_dump({"token": EXECUTOR_TOKEN, kind: section}))
    return path


def start_executor_process(
    root: pathlib.Path, config: pathlib.Path, kind: str = "local", listen: str = "127.0.0.1:0"
) -> tuple[subprocess.Popen[bytes], str]:
    """A `starforge-executor` process and its address; `listen`: a restart's old address."""
    ready = root / "executor.ready"
    ready.unlink(missing_ok=True)
    log = (root / "executor.log").open("ab")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "executor_svc.main",
            "--kind",
            kind,
            "--config",
            str(config),
            "--listen",
            listen,
            "--ready-file",
            str(ready),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=REPO,
    )
    deadline = time.monotonic() + 30
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("executor did not start: " + (root / "executor.log").read_text()[-2000:])
        time.sleep(0.05)
    time.sleep(0.05)
    return proc, json.loads(ready.read_text())["address"]


def end_leftover_attempts(state_dir: pathlib.Path, grace: float = 5.0) -> int:
    """End the process-runtime attempts a stopped test executor left running; how many.

    An attempt runs in a session of its own so that it outlives an executor restart, so a test that
    ends before its job does would leave the job behind (a runner draining towards a console that
    is gone). Only ours, as the executor's Stop does it: SIGTERM to the wrapper's group while its
    pid is still the process the executor started (the record's start time), so the runner stops
    its command; SIGKILL to what is left after `grace`, and to the processes of that attempt
    (FORGE_ATTEMPT_ID in their environment: the command runs in a session of its own); with a job
    uid of this console's range, every process of that uid."""
    from executor_svc.local.job_users import kill_uid
    from executor_svc.local.process_runtime import group_alive, start_ticks

    live: dict[str, int] = {}
    uids: list[int] = []
    for path in (state_dir / "attempts").glob("*/attempt.json"):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if (path.parent / "exit_code").exists() or record.get("runtime") != "process":
            continue
        pid, started = int(record.get("pid") or 0), int(record.get("pid_start") or 0)
        if pid > 0 and started and start_ticks(pid) == started:
            live[str(record["attempt_id"])] = pid
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGTERM)
        if int(record.get("job_uid", -1)) > 0:
            uids.append(int(record["job_uid"]))
    deadline = time.monotonic() + grace
    while any(group_alive(pid) for pid in live.values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in live.values():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    ended = len(live) + sum(_kill_attempt_processes(attempt) for attempt in live)
    return ended + sum(kill_uid(uid) for uid in uids)


def _kill_attempt_processes(attempt_id: str) -> int:
    """SIGKILL the processes whose environment names `attempt_id` (FORGE_ATTEMPT_ID)."""
    marker = f"\0FORGE_ATTEMPT_ID={attempt_id}\0".encode()
    killed = 0
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = b"\0" + (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker in environ:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
    return killed


@contextlib.asynccontextmanager
async def console(
    root: pathlib.Path,
    *,
    runtime: str = "process",
    local: Mapping[str, Any] | None = None,
    inventory: list[InventoryConfig] | None = None,
    kind: str = "local",
    fleet_kind: str = "",
    fleet_address: str = "",
    fleet_options: Mapping[str, Any] | None = None,
    queues: Sequence[str] = (),
    **overrides: Any,
) -> AsyncIterator[Console]:
    """A console whose one fleet ("local", or named after `kind`) is a real executor process.

    `local` holds extra keys of the executor's section (for kind != "local", the whole section);
    `fleet_options` extra FleetConfig fields of the fleet (host_runtime, production).
    """
    root.mkdir(parents=True, exist_ok=True)
    proc, address = start_executor_process(root, executor_yaml(root, runtime, local, kind=kind), kind)
    cfg = ControlConfig(
        listen="127.0.0.1:0",
        state_dir=root / "console",
        capsule_dir=embedded.ensure_capsule(),
        bootstrap_admin="admin",
        default_images={"custom": "host"},
        scheduler_interval_seconds=0.1,
        reconcile_interval_seconds=0.3,
        stop_grace_seconds=3,
        fleets=[
            FleetConfig(
                name="local" if kind == "local" else kind,
                kind=fleet_kind or kind,  # a different fleet_kind: a misconfigured fleet
                address=fleet_address or address,
                inventory=inventory or [InventoryConfig(series="cpu", nodes=1, gpus_per_node=0, slots=4)],
                token=EXECUTOR_TOKEN,
                **(fleet_options or {}),
                queues=list(queues),
            )
        ],
    )
    cfg = dataclasses.replace(cfg, **overrides)
    with _ledger_url(cfg.database_url) as database_url:
        cfg = dataclasses.replace(cfg, database_url=database_url)
        try:
            app = await start_control(cfg)
        except BaseException:
            embedded.stop_process(proc)
            raise
        token = (cfg.resolved_state_dir / "admin-token").read_text().strip()
        channel = aio_channel(app.address)
        c = Console(app, token, root, proc, address, channel, extra={"user": "admin", "ledger": _ledger_backend})
        try:
            yield c
        finally:
            await channel.close(None)
            await app.stop(0)
            embedded.stop_process(proc)
            end_leftover_attempts(root / "executor")
