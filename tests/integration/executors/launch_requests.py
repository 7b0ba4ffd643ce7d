"""LaunchRequests for executor tests, with their files uploaded to a real BlobService.

Until a test needs the real runner, capsules are hand-made: `shell_capsule(script)` is a capsule
whose bootstrap.sh is the given shell script (enough for lifecycle tests), and
`verified_capsule(...)` uses the real capsule/bootstrap.sh with a real capsule.json and a tiny
Python "runner", so bootstrap's integrity check runs for real.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import pathlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from starforge_api.executor.v1 import launch_request_pb2 as lr_pb
from starforge_api.job.v1 import job_spec_pb2 as spec_pb
from starforge_api.job.v1 import job_state_pb2 as st
from starforge_api.job.v1 import workspace_pb2 as ws_pb

from capsule import layout
from common import ids
from executor_svc.base import Executor, Observation
from tests.integration.blob_server import BlobServer

ROOT = pathlib.Path(__file__).resolve().parents[3]
Files = Mapping[str, "bytes | tuple[bytes, bool]"]  # path -> content, or (content, executable)

# Scripts for bootstrap.sh.
WAIT_FOR_RELEASE = 'while [ ! -e "$FORGE_OUT_DIR/release" ]; do sleep 0.1; done\n'
RECORD_START = 'echo "$FORGE_ATTEMPT_ID gpus=${CUDA_VISIBLE_DEVICES-unset}" >> "$FORGE_OUT_DIR/starts"\n'
DUMP_ENV = 'env > "$FORGE_OUT_DIR/env-$FORGE_ATTEMPT_NUMBER.txt"\n'

TERMINAL = (st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, st.JOB_STATE_STOPPED)


@dataclass
class Bundle:
    """A capsule and a workspace, before upload."""

    capsule: dict[str, tuple[bytes, bool]]
    workspace: dict[str, tuple[bytes, bool]] = field(default_factory=dict)

    @property
    def capsule_digest(self) -> str:
        return hashlib.sha256(self.capsule["capsule.json"][0]).hexdigest()


def _norm(files: Files | None) -> dict[str, tuple[bytes, bool]]:
    return {p: (v if isinstance(v, tuple) else (v, False)) for p, v in (files or {}).items()}


def shell_capsule(script: str, workspace: Files | None = None) -> Bundle:
    """A capsule whose bootstrap.sh is `script` (no integrity check, no runner)."""
    doc = json.dumps({"schema": "starforge.capsule/v2", "test": "shell capsule", "script": script}).encode()
    return Bundle(
        capsule={"bootstrap.sh": (script.encode(), True), "capsule.json": (doc, False)},
        workspace=_norm(workspace),
    )


def verified_capsule(runner_py: str, workspace: Files, *, job_id: str, attempt_id: str) -> Bundle:
    """The real capsule/bootstrap.sh + capsule.json listing every file + a Python 'runner'."""
    bootstrap = (ROOT / "capsule" / "bootstrap.sh").read_bytes()
    runner = runner_py.encode()
    runner_name = f"runner-{hashlib.sha256(runner).hexdigest()[:16]}.pex"
    ws = _norm(workspace)

    def entry(path: str, data: bytes, executable: bool) -> layout.FileEntry:
        return layout.FileEntry(path, hashlib.sha256(data).hexdigest(), len(data), executable)

    doc = layout.capsule_json(
        job_id=job_id,
        attempt_id=attempt_id,
        attempt_number=int(attempt_id.rsplit(".", 1)[1]),
        runner=runner_name,
        capsule_files=[entry("bootstrap.sh", bootstrap, True), entry(runner_name, runner, False)],
        workspace_files=[entry(p, d, x) for p, (d, x) in ws.items()],
        run=layout.RunInfo(method="custom/custom", adapter="custom", experiment="demo", entrypoint="train.sh"),
    )
    return Bundle(
        capsule={"bootstrap.sh": (bootstrap, True), runner_name: (runner, False), "capsule.json": (doc, False)},
        workspace=ws,
    )


def upload(srv: BlobServer, files: Mapping[str, tuple[bytes, bool]]) -> list[ws_pb.WorkspaceFile]:
    out = []
    for path, (data, executable) in sorted(files.items()):
        digest = srv.store.put_bytes(data)
        out.append(ws_pb.WorkspaceFile(path=path, sha256=digest, size=len(data), executable=executable))
    return out


def launch_request(
    srv: BlobServer,
    bundle: Bundle,
    *,
    job_id: str | None = None,
    attempt_number: int = 1,
    series: str = "cpu",
    gpus: int = 0,
    image: str = "",
    env: Mapping[str, str] | None = None,
    secret_env: Mapping[str, str] | None = None,
    pools: list[spec_pb.Pool] | None = None,
    stop_grace_seconds: int = 0,
) -> lr_pb.LaunchRequest:
    """A LaunchRequest whose files are in `srv`'s store."""
    job_id = job_id or ids.new_job_id()
    attempt_id = ids.attempt_id(job_id, attempt_number)
    return lr_pb.LaunchRequest(
        attempt_id=attempt_id,
        job_id=job_id,
        attempt_number=attempt_number,
        owner="tester",
        project="@tester/lab",
        spec=spec_pb.JobSpec(
            api_version="forge/v2",
            method="custom/custom",
            workspace=ws_pb.WorkspaceManifest(files=upload(srv, bundle.workspace)),
        ),
        pools=pools if pools is not None else [spec_pb.Pool(name="main", series=series, nodes=1, gpus_per_node=gpus)],
        image=image,
        capsule=lr_pb.Capsule(files=upload(srv, bundle.capsule), capsule_digest=bundle.capsule_digest),
        blob_source=lr_pb.BlobSource(address=srv.address, token=srv.token),
        ingest=lr_pb.IngestTarget(address="127.0.0.1:9", token=f"ingest-{attempt_id}"),
        env=dict(env or {}),
        secret_env=dict(secret_env or {}),
        labels={"starforge.dev/owner": "tester"},
        stop_grace_seconds=stop_grace_seconds,
    )


async def wait_for(ex: Executor, attempt_id: str, *states: int, timeout: float = 30.0) -> Observation:
    """Observe until the attempt is in one of `states` (default: any terminal state)."""
    states = states or TERMINAL
    deadline = time.monotonic() + timeout
    while True:
        (obs,) = await ex.observe([attempt_id])
        if obs.state in states:
            return obs
        if time.monotonic() > deadline:
            raise AssertionError(f"{attempt_id} did not reach {states} in {timeout}s: {obs}")
        await asyncio.sleep(0.05)


async def wait_for_log(ex: Executor, attempt_id: str, line: str, timeout: float = 30.0) -> Observation:
    """Observe until `line` is among the attempt's last log lines."""
    deadline = time.monotonic() + timeout
    while True:
        (obs,) = await ex.observe([attempt_id])
        if line in obs.log_tail:
            return obs
        if time.monotonic() > deadline:
            raise AssertionError(f"{attempt_id} never printed {line!r} in {timeout}s: {obs}")
        await asyncio.sleep(0.05)


async def stop_everything(ex: Executor) -> None:
    """Stop what a test left running, through the executor's own records (by PID / container)."""
    for obs in await ex.list_attempts():
        if obs.state in (st.JOB_STATE_RUNNING, st.JOB_STATE_PENDING):
            await ex.stop(obs.attempt_id, 1.0)


def read_env(path: pathlib.Path) -> dict[str, str]:
    """`env` output as a dict (values without newlines)."""
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
