"""Helpers for the run-token tests: a console whose local executor runs as an unprivileged user,
hostile training scripts, and an ingest client that speaks with a given run token.

The executor runs as `nobody` (setpriv) for the process runtime, so the capsule, the runner and
the training command all run as that one user, as they do on a node where jobs share the
executor's user: the runner and the executor must then keep the token from same-user code.
(As root, the training command could read any process; that is not the case under test.)
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

import grpc
from starforge_api.control.v1 import blob_service_pb2 as blob
from starforge_api.control.v1 import blob_service_pb2_grpc as blob_grpc
from starforge_api.control.v1 import error_reason_pb2
from starforge_api.ingest.v1 import ingest_service_pb2 as ing
from starforge_api.ingest.v1 import ingest_service_pb2_grpc as ing_grpc
from starforge_api.job.v1 import lifecycle_event_pb2 as lc

from common.channel import aio_channel, bearer
from common.rpc_status import from_rpc_error
from control import auth, embedded
from control.app import start_control
from control.config import ControlConfig, FleetConfig, InventoryConfig
from tests import factories as f
from tests.integration.console import EXECUTOR_TOKEN, REPO, Console, executor_yaml

NOBODY = 65534
# What a run token looks like (control/auth.py): a match anywhere is a leaked token.
RUN_TOKEN = re.compile(rb"sfr_[0-9a-z]{10}_[A-Za-z0-9_-]{20,}")

# Waits for "$FORGE_OUT_DIR/go-<attempt number>" (the test's go-ahead), then exits 0.
WAIT_FOR_GO = """\
#!/usr/bin/env bash
echo "attempt $FORGE_ATTEMPT_NUMBER up"
while [ ! -e "$FORGE_OUT_DIR/go-$FORGE_ATTEMPT_NUMBER" ]; do sleep 0.2; done
echo "attempt $FORGE_ATTEMPT_NUMBER done"
"""

# Training code that looks for the run token where a same-user process could: its own
# environment, the scratch dir (the token file), and its ancestors' environ, cmdline, memory and
# open files under /proc. Prints one JSON line "STEAL {...}".
STEAL_PY = r"""
import json, os, re

PAT = re.compile(rb"sfr_[0-9a-z]{10}_[A-Za-z0-9_-]{20,}")
found, denied, read = [], [], []


def scan(label, data):
    if PAT.search(data):
        found.append(label)


def parent(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


for k, v in os.environ.items():
    scan("own environment", f"{k}={v}".encode())
env_names = sorted(k for k in os.environ if k.startswith("FORGE_INGEST_TOKEN"))
scratch = os.environ["FORGE_SCRATCH_DIR"]
token_file = os.path.exists(os.path.join(scratch, ".forge-ingest-token"))
for top, dirs, files in os.walk(scratch):
    dirs[:] = [d for d in dirs if d != ".pex"]  # the runner's unpacked wheels
    for name in files:
        path = os.path.join(top, name)
        try:
            with open(path, "rb") as f:
                scan("scratch " + path, f.read(1 << 24))
        except OSError:
            pass

# Every ancestor (the shell of train.sh, the runner, what started it: the executor's wrapper, the
# executor, docker-init): the processes that held the token or started its holder. (Not every
# process on the host: other test sessions' processes are not this attempt's business.)
ancestors, pid = [], os.getpid()
while pid > 1:
    pid = parent(pid)
    ancestors.append(pid)
# The runner started train.sh (bash, whose command line names it).
runner = 0
for i, pid in enumerate(ancestors[:-1]):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"train.sh" in f.read():
                runner = ancestors[i + 1]
                break
    except OSError:
        pass

for pid in ancestors:
    name = str(pid)
    base = "/proc/" + name
    for what in ("environ", "cmdline"):
        try:
            with open(f"{base}/{what}", "rb") as f:
                scan(f"{name} {what}", f.read())
            read.append(f"{name} {what}")
        except OSError:
            denied.append(f"{name} {what}")
    try:
        with open(f"{base}/maps") as f:
            maps = f.read().splitlines()
        with open(f"{base}/mem", "rb", 0) as mem:
            for line in maps:
                addr, perms = line.split()[:2]
                lo, hi = (int(x, 16) for x in addr.split("-"))
                if "r" not in perms or hi - lo > 256 << 20:
                    continue
                try:
                    mem.seek(lo)
                    scan(f"{name} mem", mem.read(hi - lo))
                except (OSError, OverflowError, ValueError):
                    pass
        read.append(f"{name} mem")
    except OSError:
        denied.append(f"{name} mem")
    try:
        fds = os.listdir(f"{base}/fd")
    except OSError:
        denied.append(f"{name} fd")
        continue
    opened = 0
    for fd in fds:
        try:
            h = os.open(f"{base}/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            os.lseek(h, 0, os.SEEK_SET)
            scan(f"{name} fd {fd}", os.read(h, 1 << 24))
            opened += 1
        except OSError:
            pass
        finally:
            os.close(h)
    (read if opened else denied).append(f"{name} fd")

print("STEAL " + json.dumps({
    "found": found, "denied": denied, "read": read, "runner": runner, "ancestors": ancestors,
    "env_names": env_names, "token_file": token_file,
}), flush=True)
"""

STEAL_SH = """\
#!/usr/bin/env bash
python3 experiments/exp/steal.py
"""


def stolen(lines: Sequence[str]) -> dict[str, Any]:
    """The hostile script's findings, from the job's log."""
    for line in lines:
        if line.startswith("STEAL "):
            return dict(json.loads(line[len("STEAL ") :]))
    raise AssertionError("the hostile script printed no findings; the job's log:\n" + "\n".join(lines[-40:]))


@contextlib.contextmanager
def unprivileged_root() -> Iterator[pathlib.Path]:
    """A directory `nobody` owns and can reach (pytest's tmp dirs are private to root)."""
    root = pathlib.Path(tempfile.mkdtemp(prefix="sf-tokens-", dir="/tmp"))
    try:
        root.chmod(0o755)
        os.chown(root, NOBODY, NOBODY)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def start_executor(root: pathlib.Path, config: pathlib.Path, *, as_nobody: bool) -> tuple[subprocess.Popen[bytes], str]:
    """`starforge-executor --kind local` as tests/integration/console.py starts it, optionally as
    `nobody` with no capabilities."""
    ready = root / "executor.ready"
    ready.unlink(missing_ok=True)
    log = (root / "executor.log").open("ab")
    prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"] if as_nobody else []
    command = [sys.executable, "-m", "executor_svc.main", "--kind", "local", "--config", str(config)]
    proc = subprocess.Popen(
        [*prefix, *command, "--listen", "127.0.0.1:0", "--ready-file", str(ready)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=REPO,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    deadline = time.monotonic() + 60
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            embedded.stop_process(proc)
            raise RuntimeError("executor did not start: " + (root / "executor.log").read_text()[-2000:])
        time.sleep(0.05)
    time.sleep(0.05)
    return proc, json.loads(ready.read_text())["address"]


@contextlib.asynccontextmanager
async def token_console(
    root: pathlib.Path,
    *,
    runtime: str = "process",
    local: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> AsyncIterator[Console]:
    """A console (in this process) with one local fleet; a process-runtime executor runs as
    `nobody` (`root` must be reachable by it: see `unprivileged_root`)."""
    as_nobody = runtime == "process"
    config = executor_yaml(root, runtime, local)
    if as_nobody:
        os.chown(config, NOBODY, NOBODY)
    proc, address = start_executor(root, config, as_nobody=as_nobody)
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
                name="local",
                kind="local",
                address=address,
                inventory=[InventoryConfig(series="cpu", nodes=1, gpus_per_node=0, slots=4)],
                token=EXECUTOR_TOKEN,
            )
        ],
    )
    app = await start_control(dataclasses.replace(cfg, **overrides))
    token = (app.ctx.cfg.resolved_state_dir / "admin-token").read_text().strip()
    channel = aio_channel(app.address)
    c = Console(app, token, root, proc, address, channel, extra={"user": "admin"})
    try:
        yield c
    finally:
        await channel.close(None)
        await app.stop(0)
        embedded.stop_process(proc)


async def attempt_token(c: Console, job_id: str, attempt_id: str) -> str:
    """A run token of `attempt_id`, minted as dispatch mints them: what its training code would
    hold had it captured its attempt's token (the tests below show it cannot)."""
    return await c.app.ctx.db.run(lambda s: auth.issue_run_token(s, "admin", job_id, attempt_id))


def exited(seq: int, code: int = 0) -> ing.Record:
    return f.lifecycle_record(seq, lc.LIFECYCLE_PHASE_COMMAND_EXITED, exit_code=code)


def phase(seq: int, value: int) -> ing.Record:
    return f.lifecycle_record(seq, value)


def log_line(seq: int, text: str) -> ing.Record:
    return f.log_record(seq, text)


async def report(c: Console, token: str, attempt_id: str, records: Sequence[ing.Record]) -> list[int]:
    """Send one batch over IngestService.Report as a capsule would, to the address attempts are
    told (the ingest port when the console has one); the acked seqs.
    Raises grpc.aio.AioRpcError when the console refuses."""

    async def batches() -> AsyncIterator[ing.ReportRequest]:
        yield ing.ReportRequest(attempt_id=attempt_id, records=list(records))

    async with aio_channel(c.app.ctx.public_ingest_address) as channel:
        call = ing_grpc.IngestServiceStub(channel).Report(batches(), metadata=bearer(token))
        return [r.acked_seq async for r in call]


async def cursor(c: Console, token: str, attempt_id: str) -> int:
    async with aio_channel(c.app.ctx.public_ingest_address) as channel:
        r = await ing_grpc.IngestServiceStub(channel).GetCursor(
            ing.GetCursorRequest(attempt_id=attempt_id), metadata=bearer(token)
        )
        return int(r.acked_seq)


async def read_blob(c: Console, token: str, digest: str) -> bytes:
    async with aio_channel(c.address) as channel:
        call = blob_grpc.BlobServiceStub(channel).ReadBlob(blob.ReadBlobRequest(digest=digest), metadata=bearer(token))
        return b"".join([r.data async for r in call])


async def refused(coro: Any) -> grpc.aio.AioRpcError:
    """The error the console answered `coro` with (an AssertionError if it accepted)."""
    try:
        result = await coro
    except grpc.aio.AioRpcError as e:
        return e
    raise AssertionError(f"the console accepted it: {result!r}")


def reason_of(e: grpc.aio.AioRpcError) -> str:
    """The ErrorReason name the console sent with the error (google.rpc.ErrorInfo)."""
    return str(error_reason_pb2.ErrorReason.Name(from_rpc_error(e).reason))
