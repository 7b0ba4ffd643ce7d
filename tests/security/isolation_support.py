"""Helpers for the isolation tests: consoles whose jobs run as their own uids, a second user,
and where an attempt's files live on the executor's host.

A console here is the integration suite's (a control plane in this process and a real
`starforge-executor --kind local` process). With the process runtime its executor gets a
`job_uid_range` of its own (a random slice, so sessions on one host never share uids) and a
state dir under /tmp whose parents jobs can traverse (pytest's tmp dirs are 0700).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import pathlib
import random
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from starforge_api.control.v1 import account_service_pb2 as acc
from starforge_api.control.v1 import account_service_pb2_grpc as acc_grpc
from starforge_api.job.v1 import job_pb2, job_spec_pb2, job_state_pb2

from tests.integration.console import Console, console

TERMINAL = (job_state_pb2.JOB_STATE_SUCCEEDED, job_state_pb2.JOB_STATE_FAILED, job_state_pb2.JOB_STATE_STOPPED)

# Python for a job's own probe (inside its train.sh): a process's parent pid and command line, as
# the job's uid reads them from /proc.
PROC_READERS = r"""
def parent(pid):
    with open(f"/proc/{pid}/stat", "rb") as f:
        raw = f.read()
    return int(raw[raw.rfind(b")") + 2 :].split()[1])

def cmdline(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().decode().split("\0")[:-1]
"""


def uid_range() -> list[int]:
    """64 uids of their own for one console."""
    first = 300_000 + random.randrange(0, 4096) * 64
    return [first, first + 63]


@contextlib.asynccontextmanager
async def isolated_console(
    *, runtime: str = "process", local: Mapping[str, Any] | None = None, **overrides: Any
) -> AsyncIterator[Console]:
    """A console whose local executor runs every process-runtime job as its own uid."""
    root = pathlib.Path(tempfile.mkdtemp(prefix="sf-iso-", dir="/tmp"))
    root.chmod(0o711)
    section = {"job_uid_range": uid_range(), **(local or {})} if runtime == "process" else dict(local or {})
    try:
        async with console(root, runtime=runtime, local=section, **overrides) as c:
            yield c
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def user(c: Console, name: str) -> Console:
    """The same console as seen by a new normal user `name` (their personal access token)."""
    accounts = acc_grpc.AccountServiceStub(c.channel)
    token = (await accounts.CreateUser(acc.CreateUserRequest(name=name), metadata=c.md)).token
    return dataclasses.replace(c, token=token, extra={**c.extra, "user": name})


def state_dir(c: Console) -> pathlib.Path:
    """The state dir of the node that runs the console's jobs (its local executor's, or a forgelet's)."""
    return pathlib.Path(c.extra.get("node_state_dir") or c.root / "executor")


def out_dir(c: Console, job_id: str) -> pathlib.Path:
    return state_dir(c) / "out" / job_id


def attempt_dir(c: Console, job_id: str, number: int = 1) -> pathlib.Path:
    return state_dir(c) / "attempts" / f"{job_id}.{number}"


def cache_entry(c: Console, digest: str, executable: bool = False) -> pathlib.Path:
    return state_dir(c) / "blobs" / digest[:2] / (digest + (".x" if executable else ""))


def capsule_digests(c: Console) -> dict[str, str]:
    """sha256 of the console's own capsule files (what every job's capsule dir must hold)."""
    capsule = pathlib.Path(c.app.ctx.cfg.capsule_dir)
    files = [capsule / "bootstrap.sh", *capsule.glob("runner-*.pex"), capsule / "sdk" / "starforge" / "__init__.py"]
    return {str(p.relative_to(capsule)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


async def submit(
    c: Console,
    train_sh: str,
    *,
    files: Mapping[str, str] | None = None,
    image: str = "host",
    experiment: str = "exp",
    dataset: str = "",
    profile: str = "",
) -> job_pb2.Job:
    """A custom/custom job of `c`'s user; `dataset` ("owner/name@v"): mounted as TRAIN_DATA_DIR."""
    extra = {k: v.encode() for k, v in (files or {}).items()}
    fields: dict[str, Any] = {}
    if dataset:
        fields["train_data"] = job_spec_pb2.DataRef(dataset=dataset)
    if profile:
        fields["pools"] = [job_spec_pb2.PoolRequest(profile=profile)]
    return await c.submit_custom(train_sh, extra_files=extra, config={"image": image}, experiment=experiment, **fields)


async def finish(c: Console, job_id: str, timeout: float = 180.0) -> job_pb2.Job:
    return await c.wait(job_id, *TERMINAL, timeout=timeout)


async def wait_file(path: pathlib.Path, c: Console, job_id: str, timeout: float = 120.0) -> None:
    """Until `path` exists (written by a job); fails early when the job ended without it."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        job = await c.get(job_id)
        if job.state in TERMINAL or time.monotonic() > deadline:
            raise AssertionError(f"{path} never appeared; job {job_id}: {job}; logs: {await c.logs(job_id)}")
        await asyncio.sleep(0.2)


def read_json(path: pathlib.Path) -> Any:
    return json.loads(path.read_text())


def job_text(job: job_pb2.Job) -> str:
    """Everything the ledger says about how a job ended (for messages and assertions)."""
    return str(job)
