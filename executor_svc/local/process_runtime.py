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
letting the control plane launch it a second time. A record without a pid and without
`wrapper.pid` may belong to a spawn whose wrapper has not run its first line yet, so it is read
as "never started" (no start time: the executor forgets it and the re-sent launch starts the
same attempt) only once it is SPAWN_GRACE_SECONDS old; before that, a look waits for the pid.

With `local.job_uid_range` (job_users.py) the wrapper stays root and runs bootstrap.sh through
`setpriv` as the attempt's own uid: the job can neither signal the wrapper nor write the exit code,
the record or the log file's directory, and it gets HOME and its runner's PEX_ROOT in its own
scratch dir (a PEX_ROOT shared between jobs would be code one job could change for the next; the
job's own PEX_ROOT is its command's, executor_svc/capsule_env.py). Without it, every
attempt runs as the executor's user: one trusted user only.

With job uids and a shared runner venv (pex_warm.py), an attempt is not `sh` and bootstrap.sh
under a wrapper but one fork of a warm runner process for that venv (zygote.py), which is itself
the wrapper: the forked runner writes `wrapper.pid`, leads its session and drops to the uid
after the same integrity check; the zygote (root) waits for it and writes `exit_code`. Until the
zygote has written it, an ended runner is a zombie of the zygote, which counts as running here
for a record the zygote took (`AttemptRecord.preforked`, `_running`): without that, an attempt
observed in between would read "gone without an exit code". A record is adopted by
`wrapper.pid` when the process's working directory is the attempt's or inside it (the runner
works in the attempt's workspace). When no zygote can take an attempt it starts as above.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from executor_svc.base import RUNTIME_PROCESS
from executor_svc.capsule_env import CapsulePaths, capsule_env, inherited_env, write_token_file
from executor_svc.local import job_users
from executor_svc.local.pex_warm import ENV_KEYS as SHARED_PEX_ENV
from executor_svc.local.pex_warm import ENV_VENV as SHARED_PEX_VENV
from executor_svc.local.pex_warm import SharedPex
from executor_svc.local.records import AttemptRecord, Layout
from executor_svc.local.runtime import LOG_TAIL_LINES, Runtime, RuntimeState, StartSpec, read_log_tail
from executor_svc.local.zygote import Zygotes, ZygoteSpec

log = logging.getLogger("starforge.executor.local.process")

# argv: capsule dir, attempt dir, then the privilege drop prefix (none when unisolated).
WRAPPER = (
    'trap ":" TERM INT HUP; c=$1; r=$2; shift 2; '
    'echo $$ > "$r/wrapper.pid.tmp" && mv "$r/wrapper.pid.tmp" "$r/wrapper.pid"; '
    '"$@" sh "$c/bootstrap.sh"; rc=$?; '
    'echo "$rc" > "$r/exit_code.tmp" && mv "$r/exit_code.tmp" "$r/exit_code"'
)
KILL_WAIT_SECONDS = 5.0
# Stop waits this much past the grace before SIGKILL of the attempt's group. The runner stops its
# command (a session of its own, capsule/runner/process.py) within the same grace, SIGKILL after
# it; killing the runner first would orphan a command that ignores SIGTERM, and without a job uid
# (kill_uid) nothing else would end it.
STOP_MARGIN_SECONDS = 2.0
POLL_SECONDS = 0.05
# How long after its record was saved an attempt without a pid may still show its wrapper: the
# spawn follows the save within milliseconds, and the wrapper writes `wrapper.pid` first thing.
SPAWN_GRACE_SECONDS = 5.0
# In the attempt's root: the wrapper's (or forked runner's) own pid, written first thing.
WRAPPER_PID = "wrapper.pid"


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


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return []


def _cwd(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


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


def _create_log(log_path: Path) -> None:
    """The attempt's log, root's (the executor's user's), read by the executor and the operator."""
    with log_path.open("ab"):
        os.chmod(log_path, 0o640)


def _spawn(
    capsule: Path, root: Path, cwd: Path, log_path: Path, env: dict[str, str], prefix: Sequence[str] = ()
) -> subprocess.Popen[bytes]:
    """The wrapper; `prefix` runs bootstrap.sh as the attempt's uid (job_users.drop_privileges)."""
    with log_path.open("ab") as log:
        os.chmod(log_path, 0o640)
        return subprocess.Popen(
            ["sh", "-c", WRAPPER, "starforge-capsule", str(capsule), str(root), *prefix],
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

    name = RUNTIME_PROCESS

    def __init__(
        self,
        layout: Layout,
        uid_range: list[int] | None = None,
        preforked: bool = True,
        warm_capsule: Path | None = None,
    ) -> None:
        self._layout = layout
        self._warm_capsule = warm_capsule
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._uids = (
            job_users.JobUids(job_users.UidRange(uid_range[0], uid_range[1]), layout.state_dir / "job-uids")
            if uid_range
            else None
        )
        # Uids of attempts not cleaned up yet; read from the records on first use.
        self._held: set[int] | None = None
        # With job uids: the runner's venv, installed once per node as root, read-only to jobs,
        # and a pre-forked runner per such venv (zygote.py) unless turned off.
        self._shared_pex = SharedPex(layout.state_dir) if self._uids is not None else None
        bootstrap = warm_capsule / "bootstrap.sh" if warm_capsule is not None else None
        self._zygotes = (
            Zygotes(layout.state_dir, bootstrap=bootstrap) if self._shared_pex is not None and preforked else None
        )

    @property
    def shares_cache(self) -> bool:
        """Jobs run as uids that cannot write the cache's root-owned read-only entries."""
        return self._uids is not None

    async def prepare_host(self) -> None:
        if self._uids is None:
            log.warning(
                "process runtime without local.job_uid_range: every job runs as this executor's user "
                "and can read and change what other jobs use; serve one trusted user only"
            )
            return
        await asyncio.to_thread(job_users.check_host, self._layout.state_dir)
        await asyncio.to_thread(
            job_users.secure_layout,
            self._layout.state_dir,
            self._layout.attempts_dir,
            self._layout.state_dir / "out",
            self._layout.cache_dir,
        )

    def _held_uids(self) -> set[int]:
        if self._held is None:
            self._held = set()
            for attempt_id in self._layout.attempt_ids():
                r = AttemptRecord.load(self._layout.attempt(attempt_id).record)
                if r is not None and r.cleaned_at is None and r.job_uid > 0:
                    self._held.add(r.job_uid)
        return self._held

    def _isolate(self, spec: StartSpec, record: AttemptRecord, env: dict[str, str]) -> list[str]:
        """Allocate the attempt's uid, hand it its directories; the command prefix that drops to it."""
        if self._uids is None:
            return []
        uid = self._uids.allocate(self._held_uids())
        self._held_uids().add(uid)
        record.job_uid = uid
        dirs = spec.dirs
        job_users.hand_over(dirs.root, (dirs.capsule, dirs.datasets), (dirs.workspace, dirs.scratch), spec.out_dir, uid)
        env["HOME"] = str(dirs.scratch)
        return job_users.drop_privileges(uid)

    def _reap(self) -> None:
        for attempt_id, child in list(self._children.items()):
            if child.poll() is not None:
                del self._children[attempt_id]

    async def start(self, spec: StartSpec, record: AttemptRecord) -> None:
        dirs = spec.dirs
        visible = ",".join(str(g) for g in spec.gpus)
        extra = {"CUDA_VISIBLE_DEVICES": visible, "NVIDIA_VISIBLE_DEVICES": visible or "void"}
        if self._uids is None:
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
        prefix = await asyncio.to_thread(self._isolate, spec, record, env)
        for key in SHARED_PEX_ENV:  # only the executor names a shared runner venv, never the job
            env.pop(key, None)
        shared: dict[str, str] = {}
        if self._shared_pex is not None:
            shared = await self._shared_pex.env_for(dirs.capsule, env, spec.request.env)
            env.update(shared)
        # Readable by the attempt's own uid only (the runner reads and deletes it).
        owner = record.job_uid if record.job_uid >= 0 else None
        await asyncio.to_thread(write_token_file, spec.request, dirs.scratch, uid=owner, gid=owner)
        if self._zygotes is not None and shared:
            await asyncio.to_thread(_create_log, dirs.log)
            forked = await self._zygotes.fork(
                shared[SHARED_PEX_VENV], ZygoteSpec(dirs.root, dirs.log, dirs.workspace, record.job_uid, env)
            )
            if forked is not None:  # 0: a runner has it, its pid comes from wrapper.pid (_adopt)
                record.preforked = True
                record.pid = forked
                record.pid_start = start_ticks(forked) if forked else 0
                record.handle = str(forked)
                return
        child = await asyncio.to_thread(_spawn, dirs.capsule, dirs.root, dirs.workspace, dirs.log, env, prefix)
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
            pid = int((root / WRAPPER_PID).read_text().strip())
        except (FileNotFoundError, ValueError):
            return
        ticks = start_ticks(pid)
        # the `sh` wrapper names the attempt's directory in its arguments; a pre-forked runner works
        # in it (its workspace)
        cwd = _cwd(pid)
        if ticks and (str(root) in _cmdline(pid)[3:] or cwd == str(root) or cwd.startswith(f"{root}/")):
            record.pid, record.pid_start, record.handle = pid, ticks, str(pid)

    def _running(self, record: AttemptRecord) -> bool:
        self._reap()
        self._adopt(record)
        if record.pid <= 0:
            return False
        fields = _proc_stat(record.pid)  # read once: state, and start time against a reused pid
        ticks = int(fields[19]) if fields is not None else 0
        state = fields[0] if fields is not None and ticks == record.pid_start else None
        if state is not None and state not in ("Z", "X"):
            return True
        if state == "Z" and record.preforked:
            # ended, and its zygote has not reaped it: it writes the exit code first (an `sh`
            # wrapper writes its own before it exits, and its parent need not reap it soon)
            return True
        # the wrapper is gone but something of its group still runs
        return ticks in (0, record.pid_start) and group_alive(record.pid)

    async def inspect(self, record: AttemptRecord) -> RuntimeState:
        seen = self._look(record)
        if seen is None and await self._spawned_late(record):
            seen = self._look(record)  # the wrapper wrote its pid meanwhile: it may even have ended
        if seen is not None:
            return seen
        started = _utc(record.created_at)
        if record.pid <= 0 and not self._wrapper_pid(record).exists():
            # saved before a spawn that never happened (the executor died in between): nothing
            # of it ran, and the launch the control plane sends again starts it afresh
            return RuntimeState(exists=False, raw="never started")
        return RuntimeState(exists=False, started_at=started, raw="process gone without an exit code")

    def _look(self, record: AttemptRecord) -> RuntimeState | None:
        """The attempt's state when it has an exit code or runs; None when neither."""
        code, ended = self._exit_code(record)
        started = _utc(record.created_at)
        if code is not None:
            return RuntimeState(
                exists=True, exit_code=code, started_at=started, ended_at=_utc(ended), raw=f"exited ({code})"
            )
        if self._running(record):
            return RuntimeState(exists=True, running=True, started_at=started, raw=f"running (pid {record.pid})")
        return None

    def _wrapper_pid(self, record: AttemptRecord) -> Path:
        return self._layout.attempt(record.attempt_id).root / WRAPPER_PID

    async def _spawned_late(self, record: AttemptRecord) -> bool:
        """For a record saved before its spawn (no pid) and without `wrapper.pid` yet: whether the
        wrapper writes it within SPAWN_GRACE_SECONDS of the save. An executor that died between
        its spawn and the wrapper's first line must not read the attempt as never started (it
        would be started a second time beside the first)."""
        if record.pid > 0:
            return False
        path = self._wrapper_pid(record)
        while not path.exists():
            if time.time() - record.created_at >= SPAWN_GRACE_SECONDS:
                return False
            await asyncio.sleep(POLL_SECONDS)
        return True

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
        if not await self._wait_gone(record, grace_seconds + STOP_MARGIN_SECONDS):
            self._signal(record, signal.SIGKILL)
            await self._wait_gone(record, KILL_WAIT_SECONDS)
        if record.job_uid > 0:  # what left the process group (setsid, double fork)
            await asyncio.to_thread(job_users.kill_uid, record.job_uid)

    async def remove(self, record: AttemptRecord) -> int:
        self._children.pop(record.attempt_id, None)
        if record.job_uid > 0:
            await asyncio.to_thread(job_users.kill_uid, record.job_uid)
            if record.out_dir:
                await asyncio.to_thread(job_users.take_back, Path(record.out_dir))
            self._held_uids().discard(record.job_uid)
        return 0

    async def warm(self) -> None:
        """With `warm_capsule` (local.warm_capsule): install that capsule's runner venv and start
        its pre-forked runner now, so the first attempts fork at once instead of waiting seconds
        for the install (what they would do for the same runner, in the same environment)."""
        if self._warm_capsule is None or self._shared_pex is None:
            return
        started = time.monotonic()
        venv = await self._shared_pex.warm(self._warm_capsule, inherited_env())
        if venv is None:
            return
        forked = self._zygotes is not None and await self._zygotes.start(venv)
        log.info(
            "warmed the runner of %s in %.1f s: shared venv %s%s",
            self._warm_capsule,
            time.monotonic() - started,
            venv,
            ", pre-forked runner started" if forked else "",
        )

    async def close(self) -> None:
        if self._zygotes is not None:
            await self._zygotes.close()
