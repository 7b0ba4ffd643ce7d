"""Pre-forked runners for the process runtime with job uids (the runner's side: sfrunner.zygote).

An attempt started through `sh bootstrap.sh` costs two interpreter starts and the runner's
imports, most of its CPU. For every shared runner venv (pex_warm.py: root-owned, installed once
per node, runner and interpreter) the executor starts one zygote: that venv's own entry, as the
attempt's runner would start, with ``PEX_MODULE=sfrunner.zygote:serve``, as root, an empty
environment and ``/`` as its directory. It imports the runner once and then forks, per attempt,
the attempt's runner itself: one fork, which leads a session of its own, writes ``wrapper.pid``,
drops to the attempt's uid and runs bootstrap.sh's own checks before the runner's ``main``. The
zygote waits for it and writes its ``exit_code`` (what the `sh` wrapper does for an attempt that
starts the usual way).

The attempt's spec (its directories, log, uid and environment) is written here to a file in
``<state>/zygote``, a directory only root can enter, named by a counter; the zygote reads the
name alone and its forked child reads the file and deletes it. So nothing of one attempt is
ever in the memory that the next attempt's runner inherits. The file's inode is taken in the
attempt's own directory (an unnamed file linked into ``<state>/zygote``), not in the spec
directory's block group, where one made and one deleted per attempt made every new file cost
~1 ms of kernel CPU on ext4 without a journal (``_write_private``).

A zygote is the executor's child and reads its stdin: when the executor goes (even by kill -9)
the zygote sees the end of its input, forks no more, and exits once the attempts it runs have
ended and their exit codes are written; closing the executor does the same. The attempts lead
sessions of their own and live on; the next executor finds them by ``wrapper.pid`` and their
working directory (inside the attempt's), and reads ``exit_code`` as for the `sh` wrapper. A
zygote that cannot start or stops answering is killed (by its pid): the attempts it ran go on,
without an exit code (their runners report their own ends; the control plane ends an attempt
from the executor's observation otherwise); the attempt at hand goes the usual way, and the venv
gets a new zygote no sooner than RETRY_SECONDS later. One that died (killed by someone, out of
memory) is replaced at the next launch. One that no attempt used for IDLE_SECONDS has its input
closed at the next launch for another venv: after an upgrade of the runner, the old runner's
zygote would otherwise hold its memory until the executor stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("starforge.executor.local.zygote")

SPEC_DIR = "zygote"
START_TIMEOUT_S = 120.0  # the runner's imports, once per venv, on a loaded node
FORK_TIMEOUT_S = 10.0
RETRY_SECONDS = 60.0
STALE_SPEC_SECONDS = 60.0  # a spec an earlier executor's zygote never forked for (it holds secrets)
IDLE_SECONDS = 600.0  # a zygote unused this long is stopped when another venv's launches
CLOSE_WAIT_S = 2.0  # how long closing the executor waits for a zygote without attempts to exit


@dataclass(frozen=True)
class ZygoteSpec:
    """What the forked runner needs: the attempt's directory (wrapper.pid, exit_code), its log,
    the job's working directory, uid (-1: the executor's own) and environment."""

    root: Path
    log: Path
    cwd: Path
    uid: int
    env: dict[str, str]

    def to_json(self) -> bytes:
        doc = {"root": str(self.root), "log": str(self.log), "cwd": str(self.cwd), "uid": self.uid, "env": self.env}
        return json.dumps(doc).encode()


class ZygoteGone(Exception):
    """The zygote did not answer as it should; it was stopped."""


class Zygote:
    """One zygote process, for one shared runner venv.

    Started with `subprocess` rather than asyncio's subprocess transport, which kills the child
    when it is closed or collected: a zygote must outlive its executor while its attempts run. A
    daemon thread waits for it (reaps it as soon as it exits, and never holds the executor's own
    exit). Its answers are read through an asyncio pipe; its input is written directly (a short
    line at a time, one unanswered at most, so the pipe never fills)."""

    def __init__(self, venv: str, spec_dir: Path, bootstrap: Path | None = None) -> None:
        self.venv = venv
        self._spec_dir = spec_dir
        self._bootstrap = bootstrap
        self._proc: subprocess.Popen[bytes] | None = None
        self._answers: asyncio.StreamReader | None = None
        self._reader: asyncio.ReadTransport | None = None
        self._lock = asyncio.Lock()
        self.used_at = time.monotonic()  # its start, or when a launch last took it (Zygotes._zygote)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    async def start(self) -> None:
        entry = os.path.join(self.venv, "pex")
        python = os.path.join(self.venv, "bin", "python")
        env = {"PEX_MODULE": "sfrunner.zygote:serve", "FORGE_ZYGOTE_SPECS": str(self._spec_dir)}
        if self._bootstrap is not None:
            env["FORGE_ZYGOTE_BOOTSTRAP"] = str(self._bootstrap)
        self._proc = await asyncio.to_thread(
            subprocess.Popen,
            [python, "-I", entry],
            env=env,
            cwd="/",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,  # the executor's own log
            close_fds=True,
        )
        threading.Thread(target=self._proc.wait, name=f"zygote-{self._proc.pid}", daemon=True).start()
        assert self._proc.stdout is not None
        loop = asyncio.get_running_loop()
        self._answers = asyncio.StreamReader()
        protocol = asyncio.StreamReaderProtocol(self._answers)
        self._reader, _ = await loop.connect_read_pipe(lambda: protocol, self._proc.stdout)
        await self._answer(START_TIMEOUT_S, "ready")

    async def _answer(self, timeout: float, expected: str | None = None) -> str:
        assert self._answers is not None
        try:
            line = (await asyncio.wait_for(self._answers.readline(), timeout)).decode().strip()
        except (TimeoutError, OSError, UnicodeDecodeError) as exc:
            await self.stop()
            raise ZygoteGone(f"no answer ({type(exc).__name__})") from None
        if not line or line.startswith("error") or (expected is not None and line != expected):
            await self.stop()
            raise ZygoteGone(f"answered {line!r}" if line else "exited")
        return line

    async def fork(self, name: str) -> int:
        """The pid of the runner forked for the spec file `name`."""
        async with self._lock:
            if self.pid is None or self._proc is None or self._proc.stdin is None:
                raise ZygoteGone("not running")
            try:
                return await self._exchange(self._proc.stdin.fileno(), name)
            except asyncio.CancelledError:
                # an answer may still come and be read as the next fork's: this zygote is done
                self._abandon()
                raise

    async def _exchange(self, stdin: int, name: str) -> int:
        try:
            _write_all(stdin, f"{name}\n".encode())
        except OSError as exc:  # BrokenPipe: it exited
            await self.stop()
            raise ZygoteGone(str(exc)) from None
        answer = await self._answer(FORK_TIMEOUT_S)
        try:
            return int(answer)
        except ValueError:
            await self.stop()
            raise ZygoteGone(f"answered {answer!r}") from None

    def _detach(self) -> subprocess.Popen[bytes] | None:
        """Forget the process: close both pipes (its input ends) and hand it to the caller."""
        proc, self._proc = self._proc, None
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if proc is not None and proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        return proc

    def _abandon(self) -> None:
        """SIGKILL now, without waiting (its thread reaps it): for a caller being cancelled. Its
        running attempts go on; their exit codes are lost (their runners report their own ends)."""
        proc = self._detach()
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()

    async def stop(self) -> None:
        """End a zygote that misbehaved (our own child, by its pid): SIGKILL, then reap it."""
        proc = self._detach()
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await asyncio.to_thread(proc.wait)

    async def close(self, wait: float = CLOSE_WAIT_S) -> None:
        """End the zygote's input: it forks no more and exits once its attempts have ended (at once
        when none runs); wait up to `wait` seconds for that, then leave it to finish them."""
        proc = self._detach()
        if proc is None:
            return
        if not await asyncio.to_thread(_exited_within, proc, wait):
            log.info("the pre-forked runner %d stays until the attempts it runs have ended", proc.pid)


def _exited_within(proc: subprocess.Popen[bytes], seconds: float) -> bool:
    """Whether `proc` exits within `seconds` (a bounded wait: a thread never blocks past it)."""
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return False
    return True


class Zygotes:
    """The zygotes of one executor, one per shared runner venv, started on first use."""

    def __init__(self, state_dir: Path, *, idle_seconds: float = IDLE_SECONDS, bootstrap: Path | None = None) -> None:
        """`bootstrap`: the executor's own capsule's bootstrap.sh, whose program every zygote
        compiles once (sfrunner.zygote.compile_bootstrap); an attempt whose bootstrap.sh holds the
        same program is spared compiling it."""
        self._spec_dir = state_dir / SPEC_DIR
        self._bootstrap = bootstrap
        self._idle_seconds = idle_seconds
        self._zygotes: dict[str, Zygote] = {}
        self._failed_at: dict[str, float] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        # spec names: a counter, after this executor's pid (another executor's leftovers differ)
        self._prefix = os.getpid()
        self._names = itertools.count(1)
        self._prepared = False

    def _prepare(self) -> None:
        """The spec directory: root's (the executor's user's) alone; specs an earlier executor
        left (its zygote forks no more once its input ended, so no runner will take them)
        removed."""
        self._spec_dir.mkdir(mode=0o700, exist_ok=True)
        st = self._spec_dir.lstat()
        if st.st_uid != os.geteuid() or not self._spec_dir.is_dir() or self._spec_dir.is_symlink():
            raise OSError(f"{self._spec_dir} is not a directory of this executor's user")
        os.chmod(self._spec_dir, 0o700)
        now = time.time()
        for old in self._spec_dir.iterdir():
            with contextlib.suppress(OSError):
                if now - old.lstat().st_mtime > STALE_SPEC_SECONDS:
                    old.unlink()
        self._prepared = True

    async def _zygote(self, venv: str) -> Zygote | None:
        """The venv's zygote, started if need be, and in use from now: another venv's launch must
        not stop it while the caller writes a spec or asks for a fork (both take far less than
        idle_seconds). None when it cannot run."""
        async with self._locks.setdefault(venv, asyncio.Lock()):
            zygote = self._zygotes.get(venv)
            if zygote is not None and zygote.pid is not None:
                zygote.used_at = time.monotonic()
                return zygote
            if time.monotonic() - self._failed_at.get(venv, -RETRY_SECONDS) < RETRY_SECONDS:
                return None
            zygote = Zygote(venv, self._spec_dir, self._bootstrap)
            try:
                await zygote.start()
            except asyncio.CancelledError:  # the launch that started it went: so does the zygote
                zygote._abandon()
                raise
            except (OSError, ZygoteGone) as exc:
                log.warning("no pre-forked runner for %s (%s); attempts start through bootstrap.sh", venv, exc)
                self._failed_at[venv] = time.monotonic()
                self._zygotes.pop(venv, None)
                return None
            log.info("pre-forked runner for %s ready (pid %d)", venv, zygote.pid)
            self._zygotes[venv] = zygote
            zygote.used_at = time.monotonic()
            return zygote

    async def _prepared_once(self) -> bool:
        """The spec directory prepared (`_prepare`), once; False when it cannot be."""
        try:
            if not self._prepared:
                await asyncio.to_thread(self._prepare)
        except OSError as exc:
            log.warning("no pre-forked runners: %s", exc)
            return False
        return True

    async def start(self, venv: str) -> bool:
        """Start the venv's zygote now, before an attempt asks for it (it counts as used now, so
        it stays for `idle_seconds` at least); True when it runs."""
        return await self._prepared_once() and await self._zygote(venv) is not None

    async def fork(self, venv: str, spec: ZygoteSpec) -> int | None:
        """The pid of the attempt's runner, forked by the venv's zygote; 0 when a runner took the
        attempt but its pid was not told (the runner writes it to `wrapper.pid`); None when no
        runner took it (the caller starts the attempt through bootstrap.sh)."""
        if not await self._prepared_once():
            return None
        self._stop_idle(keep=venv)
        zygote = await self._zygote(venv)
        if zygote is None:
            return None
        name = f"{self._prefix}.{next(self._names)}"
        path = self._spec_dir / name
        try:
            await asyncio.to_thread(_write_private, path, spec.to_json(), spec.root)
        except OSError as exc:
            log.warning("cannot write %s (%s); this attempt starts through bootstrap.sh", path, exc)
            return None
        try:
            return await zygote.fork(name)
        except ZygoteGone as exc:
            self._failed_at[venv] = time.monotonic()
            # Whoever deletes the spec file owns the attempt: a runner that read it (and starts
            # the attempt) or this executor (which starts it through bootstrap.sh instead).
            try:
                path.unlink()
            except FileNotFoundError:
                log.warning("the pre-forked runner for %s failed after its fork (%s)", venv, exc)
                return 0
            log.warning("the pre-forked runner for %s failed (%s); this attempt starts through bootstrap.sh", venv, exc)
            return None

    def _stop_idle(self, keep: str) -> None:
        """Close the input of the zygotes of other venvs that no attempt used for `idle_seconds`:
        each exits once the attempts it forked have ended."""
        now = time.monotonic()
        for venv, zygote in list(self._zygotes.items()):
            if venv == keep or now - zygote.used_at < self._idle_seconds:
                continue
            log.info("stopping the pre-forked runner for %s: unused for %.0f s", venv, now - zygote.used_at)
            del self._zygotes[venv]
            zygote._detach()  # its input ends: it exits once its attempts have (its thread reaps it)

    async def close(self) -> None:
        """End every zygote's input (see `Zygote.close`): attempts they run keep running."""
        for zygote in self._zygotes.values():
            await zygote.close()
        self._zygotes.clear()


def _write_private(path: Path, data: bytes, near: Path) -> None:
    """A new file `path` holding `data`, readable by this user alone. Its inode is taken in the
    folder `near` (the attempt's own: an unnamed O_TMPFILE there, then linked to `path`), so the
    spec folder's block group never sees an inode made or freed per attempt: on ext4 without a
    journal a file made there, among the ones the last runners deleted, cost ~1 ms of kernel CPU
    (docs/benchmarks.md, throughput). The runner's unlink then frees the inode in `near`'s
    group. Where O_TMPFILE or the link is not possible, the file is made in place."""
    try:
        fd = os.open(near, os.O_TMPFILE | os.O_WRONLY, 0o600)
    except OSError:
        fd = -1
    if fd >= 0:
        try:
            _write_all(fd, data)
            # linkat(AT_SYMLINK_FOLLOW) of the open file (os.link makes a plain link() without a dir fd)
            folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            try:
                os.link(f"/proc/self/fd/{fd}", path.name, dst_dir_fd=folder)
            finally:
                os.close(folder)
            return
        except FileExistsError:
            raise
        except OSError:  # another file system (EXDEV), no /proc: the usual way
            pass
        finally:
            os.close(fd)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        _write_all(fd, data)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
