"""Pre-forked runners for the process runtime with job uids (the runner's side: sfrunner.zygote).

An attempt started through `sh bootstrap.sh` costs two interpreter starts and the runner's
imports, most of its CPU. For every shared runner venv (pex_warm.py: root-owned, installed once
per node, runner and interpreter) the executor starts one zygote: that venv's own entry, as the
attempt's runner would start, with ``PEX_MODULE=sfrunner.zygote:serve``, as root, an empty
environment and ``/`` as its directory. It imports the runner once and then forks, per attempt,
a wrapper that does what the `sh -c` wrapper does (session leader, ``wrapper.pid``,
``exit_code``) and the job's process, which drops to the attempt's uid and runs bootstrap.sh's
own checks before the runner's ``main``.

The attempt's spec (its directories, log, uid and environment) is written here to a file in
``<state>/zygote``, a directory only root can enter, named by a counter; the zygote reads the
name alone and its forked child reads the file and deletes it. So nothing of one attempt is
ever in the memory that the next attempt's runner inherits. The file's inode is taken in the
attempt's own directory (an unnamed file linked into ``<state>/zygote``), not in the spec
directory's block group, where one made and one deleted per attempt made every new file cost
~1 ms of kernel CPU on ext4 without a journal (``_write_private``).

A zygote is the executor's child and reads its stdin: when the executor goes (even by kill -9)
the zygote sees the end of its input and exits. The wrappers it forked lead sessions of their
own and live on; the next executor finds them by ``wrapper.pid`` and their working directory
(the attempt's), and reads ``exit_code`` as for the `sh` wrapper. A zygote that cannot start or
stops answering is killed (by its pid); the attempt goes the usual way, and the venv gets a new
zygote no sooner than RETRY_SECONDS later. One that died (killed by someone, out of memory) is
replaced at the next launch. One that no attempt used for IDLE_SECONDS is stopped at the next
launch for another venv: after an upgrade of the runner, the old runner's zygote would otherwise
hold its memory until the executor stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
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


@dataclass(frozen=True)
class ZygoteSpec:
    """What the forked wrapper needs: the attempt's directory (wrapper.pid, exit_code), its log,
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
    """One zygote process, for one shared runner venv."""

    def __init__(self, venv: str, spec_dir: Path, bootstrap: Path | None = None) -> None:
        self.venv = venv
        self._spec_dir = spec_dir
        self._bootstrap = bootstrap
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()
        self.used_at = time.monotonic()  # its start, or when a launch last took it (Zygotes._zygote)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.returncode is None else None

    async def start(self) -> None:
        entry = os.path.join(self.venv, "pex")
        python = os.path.join(self.venv, "bin", "python")
        env = {"PEX_MODULE": "sfrunner.zygote:serve", "FORGE_ZYGOTE_SPECS": str(self._spec_dir)}
        if self._bootstrap is not None:
            env["FORGE_ZYGOTE_BOOTSTRAP"] = str(self._bootstrap)
        self._proc = await asyncio.create_subprocess_exec(
            python,
            "-I",
            entry,
            env=env,
            cwd="/",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=None,  # the executor's own log
            close_fds=True,
        )
        await self._answer(START_TIMEOUT_S, "ready")

    async def _answer(self, timeout: float, expected: str | None = None) -> str:
        assert self._proc is not None
        assert self._proc.stdout is not None
        try:
            line = (await asyncio.wait_for(self._proc.stdout.readline(), timeout)).decode().strip()
        except (TimeoutError, OSError, UnicodeDecodeError) as exc:
            await self.stop()
            raise ZygoteGone(f"no answer ({type(exc).__name__})") from None
        if not line or line.startswith("error") or (expected is not None and line != expected):
            await self.stop()
            raise ZygoteGone(f"answered {line!r}" if line else "exited")
        return line

    async def fork(self, name: str) -> int:
        """The pid of the wrapper forked for the spec file `name`."""
        async with self._lock:
            if self._proc is None or self._proc.returncode is not None or self._proc.stdin is None:
                raise ZygoteGone("not running")
            try:
                return await self._exchange(self._proc.stdin, name)
            except asyncio.CancelledError:
                # an answer may still come and be read as the next fork's: this zygote is done
                self._abandon()
                raise

    async def _exchange(self, stdin: asyncio.StreamWriter, name: str) -> int:
        try:
            stdin.write(f"{name}\n".encode())
            await stdin.drain()
        except (OSError, RuntimeError) as exc:  # BrokenPipe, ConnectionReset; a closed transport
            await self.stop()
            raise ZygoteGone(str(exc)) from None
        answer = await self._answer(FORK_TIMEOUT_S)
        try:
            return int(answer)
        except ValueError:
            await self.stop()
            raise ZygoteGone(f"answered {answer!r}") from None

    def _abandon(self) -> None:
        """SIGKILL now, without waiting (asyncio reaps it): for a caller being cancelled, and for
        an idle zygote stopped at another venv's launch."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()

    async def stop(self, *, kill: bool = True) -> None:
        """End the zygote (our own child, by its pid): SIGKILL when it misbehaved (it holds
        nothing to save), SIGTERM first when the executor closes."""
        proc, self._proc = self._proc, None
        if proc is None or proc.returncode is not None:
            return
        if not kill:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 5.0)
                return
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()


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
        left (its zygote exited with it, so no wrapper will take them) removed."""
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
        """The pid of the attempt's wrapper, forked by the venv's zygote; 0 when a wrapper took the
        attempt but its pid was not told (the wrapper writes it to `wrapper.pid`); None when no
        wrapper took it (the caller starts the attempt through bootstrap.sh)."""
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
            # Whoever deletes the spec file owns the attempt: a wrapper that read it (and starts
            # the attempt) or this executor (which starts it through bootstrap.sh instead).
            try:
                path.unlink()
            except FileNotFoundError:
                log.warning("the pre-forked runner for %s failed after its fork (%s)", venv, exc)
                return 0
            log.warning("the pre-forked runner for %s failed (%s); this attempt starts through bootstrap.sh", venv, exc)
            return None

    def _stop_idle(self, keep: str) -> None:
        """Stop (SIGKILL, our own child by its pid) the zygotes of other venvs that no attempt used
        for `idle_seconds`: the wrappers they forked lead sessions of their own and live on."""
        now = time.monotonic()
        for venv, zygote in list(self._zygotes.items()):
            if venv == keep or now - zygote.used_at < self._idle_seconds:
                continue
            log.info("stopping the pre-forked runner for %s: unused for %.0f s", venv, now - zygote.used_at)
            del self._zygotes[venv]
            zygote._abandon()

    async def close(self) -> None:
        for zygote in self._zygotes.values():
            await zygote.stop(kill=False)
        self._zygotes.clear()


def _write_private(path: Path, data: bytes, near: Path) -> None:
    """A new file `path` holding `data`, readable by this user alone. Its inode is taken in the
    folder `near` (the attempt's own: an unnamed O_TMPFILE there, then linked to `path`), so the
    spec folder's block group never sees an inode made or freed per attempt: on ext4 without a
    journal a file made there, among the ones the last wrappers deleted, cost ~1 ms of kernel CPU
    (docs/benchmarks.md, throughput). The wrapper's unlink then frees the inode in `near`'s
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
