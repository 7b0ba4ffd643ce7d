"""The `process` runtime: the capsule as a child process of the executor, in its own session.

`sh bootstrap.sh` runs under a tiny `sh -c` wrapper that writes its exit code to
`attempts/<id>/exit_code` (temp + rename) when it ends, so the exit code is known even when the
executor was not running at that moment. The wrapper leads a new session and process group
(`start_new_session`): stopping the executor never signals the job, and Stop signals the whole
group. The wrapper traps TERM/INT with a no-op (not an ignore, which children would inherit) so it
outlives the capsule long enough to write the exit code.

A pid alone is not an identity (pids are reused), so the record keeps the wrapper's start time
from /proc and liveness compares both. Exited children of this executor are reaped on every
inspection; children of an earlier executor process are reaped by init.

The record is saved once before the spawn (pid 0) and again after it. An executor killed between
the two leaves a record without a pid for a capsule that does run; the wrapper writes its own pid
to `attempts/<id>/wrapper.pid` first thing, so the next executor adopts it (after checking that
the pid's command line names this attempt's directory) instead of calling the attempt lost and
letting the control plane launch it a second time.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import signal
import subprocess
import time
from pathlib import Path

from executor_svc.capsule_env import CapsulePaths, capsule_env, inherited_env, write_token_file
from executor_svc.local.records import AttemptRecord, Layout
from executor_svc.local.runtime import LOG_TAIL_LINES, Runtime, RuntimeState, StartSpec, read_log_tail

WRAPPER = (
    'trap ":" TERM INT HUP; '
    'echo $$ > "$2/wrapper.pid.tmp" && mv "$2/wrapper.pid.tmp" "$2/wrapper.pid"; '
    'sh "$1/bootstrap.sh"; rc=$?; '
    'echo "$rc" > "$2/exit_code.tmp" && mv "$2/exit_code.tmp" "$2/exit_code"'
)
KILL_WAIT_SECONDS = 5.0
POLL_SECONDS = 0.05


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state is [0]), or None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return raw[raw.rfind(b")") + 2 :].decode().split()


def start_ticks(pid: int) -> int:
    """Start time of `pid` in clock ticks since boot (0 when it does not exist)."""
    fields = _proc_stat(pid)
    return int(fields[19]) if fields else 0


def _alive(pid: int, ticks: int) -> bool:
    fields = _proc_stat(pid)
    return fields is not None and fields[0] not in ("Z", "X") and int(fields[19]) == ticks


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return []


def group_alive(pgid: int) -> bool:
    """True while any non-zombie process is in process group `pgid`."""
    if pgid <= 0:
        return False
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _proc_stat(int(entry.name))
            if fields and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                return True
    return False


def _spawn(capsule: Path, root: Path, cwd: Path, log_path: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log_path.open("ab") as log:
        return subprocess.Popen(
            ["sh", "-c", WRAPPER, "starforge-capsule", str(capsule), str(root)],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )


def _utc(ts: float | None) -> dt.datetime | None:
    return None if ts is None else dt.datetime.fromtimestamp(ts, dt.UTC)


class ProcessRuntime(Runtime):
    """Runs capsules as process groups on this host (see module docstring)."""

    name = "process"

    def __init__(self, layout: Layout) -> None:
        self._layout = layout
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    def _reap(self) -> None:
        for attempt_id, child in list(self._children.items()):
            if child.poll() is not None:
                del self._children[attempt_id]

    async def start(self, spec: StartSpec, record: AttemptRecord) -> None:
        dirs = spec.dirs
        visible = ",".join(str(g) for g in spec.gpus)
        extra = {"CUDA_VISIBLE_DEVICES": visible, "NVIDIA_VISIBLE_DEVICES": visible or "void"}
        if "PEX_ROOT" not in spec.request.env:
            # runner.pex unpacks (and compiles) its wheels once per node and runner digest, not in
            # every attempt's fresh scratch dir: that unpack was most of the capsule's start-up.
            # Pex's cache is content-addressed and safe for concurrent attempts.
            extra["PEX_ROOT"] = str(self._layout.state_dir / "pex")
        env = inherited_env()
        env.update(
            capsule_env(
                spec.request,
                CapsulePaths(
                    capsule=str(dirs.capsule),
                    workspace=str(dirs.workspace),
                    out=str(spec.out_dir),
                    scratch=str(dirs.scratch),
                    datasets=str(dirs.datasets),
                ),
                stop_grace_seconds=spec.stop_grace_seconds,
                extra=extra,
            )
        )
        write_token_file(spec.request, dirs.scratch)
        child = await asyncio.to_thread(_spawn, dirs.capsule, dirs.root, dirs.workspace, dirs.log, env)
        self._children[record.attempt_id] = child
        record.pid = child.pid
        record.pid_start = start_ticks(child.pid)
        record.handle = str(child.pid)

    def _exit_code(self, record: AttemptRecord) -> tuple[int | None, float | None]:
        path = self._layout.attempt(record.attempt_id).exit_code
        try:
            return int(path.read_text().strip()), path.stat().st_mtime
        except (FileNotFoundError, ValueError):
            return None, None

    def _adopt(self, record: AttemptRecord) -> None:
        """Fill in the pid of a record saved before its spawn from the wrapper's own pid file."""
        if record.pid > 0:
            return
        root = self._layout.attempt(record.attempt_id).root
        try:
            pid = int((root / "wrapper.pid").read_text().strip())
        except (FileNotFoundError, ValueError):
            return
        ticks = start_ticks(pid)
        if ticks and str(root) in _cmdline(pid)[3:]:
            record.pid, record.pid_start, record.handle = pid, ticks, str(pid)

    def _running(self, record: AttemptRecord) -> bool:
        self._reap()
        self._adopt(record)
        if record.pid <= 0:
            return False
        return _alive(record.pid, record.pid_start) or (
            # the wrapper is gone but something of its group still runs
            start_ticks(record.pid) in (0, record.pid_start) and group_alive(record.pid)
        )

    async def inspect(self, record: AttemptRecord) -> RuntimeState:
        code, ended = self._exit_code(record)
        started = _utc(record.created_at)
        if code is not None:
            return RuntimeState(
                exists=True, exit_code=code, started_at=started, ended_at=_utc(ended), raw=f"exited ({code})"
            )
        if self._running(record):
            return RuntimeState(exists=True, running=True, started_at=started, raw=f"running (pid {record.pid})")
        return RuntimeState(exists=False, started_at=started, raw="process gone without an exit code")

    async def log_tail(self, record: AttemptRecord, lines: int = LOG_TAIL_LINES) -> list[str]:
        return await asyncio.to_thread(read_log_tail, self._layout.attempt(record.attempt_id).log, lines)

    def _signal(self, record: AttemptRecord, sig: int) -> None:
        # Only our group: the pid must still be the wrapper we started, or its group still ours.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(record.pid, sig)

    async def _wait_gone(self, record: AttemptRecord, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while self._running(record):
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(POLL_SECONDS)
        return True

    async def stop(self, record: AttemptRecord, grace_seconds: float) -> None:
        if not self._running(record):
            return
        self._signal(record, signal.SIGTERM)
        if not await self._wait_gone(record, grace_seconds):
            self._signal(record, signal.SIGKILL)
            await self._wait_gone(record, KILL_WAIT_SECONDS)

    async def remove(self, record: AttemptRecord) -> int:
        self._children.pop(record.attempt_id, None)
        return 0
