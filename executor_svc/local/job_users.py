"""Process runtime isolation: every attempt runs as its own unprivileged uid (`local.job_uid_range`).

A uid of its own is what keeps a job from every other job on the node: it cannot write the blob
cache's read-only entries (root's, 0444), read another job's files (0700/0710 directories owned
by another uid or group), read `/proc/<pid>/environ` of another job's processes, or signal them.

Uids are handed out in order through the range (`<state_dir>/job-uids` names where a restart goes on),
skipping those of attempts not yet cleaned up, so a uid comes back only after the whole range was
used and its last attempt was cleaned up. At Cleanup every process still running as the attempt's
uid is killed (nothing it left behind can read what a later holder of the uid writes) and its
FORGE_OUT_DIR goes back to root until the job's next attempt.

Layout modes (root owns everything not said otherwise; U is the attempt's uid and gid):

    <state_dir>                 0711   jobs traverse it, never list it
      blobs/                    0700   jobs reach entries only through their attempt's links
      attempts/                 0711
        <attempt>/              0710 root:U   only the attempt's own uid enters
          capsule/, datasets/   0750 root:U   files are root's, 0444/0555
          workspace/            U:U, recursively
          scratch/              0700 U:U
          attempt.json, bootstrap.log, exit_code   root's: the job cannot forge them
      out/                      0711
        <job>/                  0700 U:U, recursively, during an attempt; root's in between
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
from dataclasses import dataclass
from pathlib import Path

from common.config import ConfigError

# Positions of the uid range `job-uids` is written ahead of the next uid (JobUids).
UID_RESERVE = 64
# The job's side of the privilege drop: the wrapper (root) runs `setpriv ... sh bootstrap.sh`.
SETPRIV = "setpriv"


@dataclass(frozen=True)
class UidRange:
    first: int
    last: int

    def __contains__(self, uid: object) -> bool:
        return isinstance(uid, int) and self.first <= uid <= self.last


def check_host(state_dir: Path) -> None:
    """ConfigError unless this host can run jobs as other uids from `state_dir`."""
    if os.geteuid() != 0:
        raise ConfigError(
            "local.job_uid_range: the executor must run as root to start jobs as other uids "
            "(remove job_uid_range to run every job as this user, unisolated)"
        )
    if shutil.which(SETPRIV) is None:
        raise ConfigError("local.job_uid_range: `setpriv` (util-linux) is not on PATH; install util-linux")
    for parent in state_dir.resolve().parents:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            raise ConfigError(
                f"local.state_dir: {state_dir} is under {parent} (mode {stat.S_IMODE(mode):o}), which jobs "
                "running as other uids cannot enter; choose a state dir whose parents are o+x"
            )


def drop_privileges(uid: int) -> list[str]:
    """Command prefix that runs the rest as `uid` (gid `uid`), no supplementary groups, and no
    way back up (no_new_privs: set-uid programs do not raise it)."""
    return [SETPRIV, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs"]


class JobUids:
    """Hands out one uid per attempt (see the module docstring).

    `job-uids` names the position a restarted executor starts from. It is written ahead of the
    uids handed out (UID_RESERVE positions, at most an eighth of the range), so it is rewritten
    once per that many launches, not at each: every rewrite is a new inode in the state dir, and
    on ext4 without a journal a file created where others were just freed costs ~1 ms of kernel
    CPU (docs/benchmarks.md, throughput). A restart skips the uids reserved but not handed out;
    a uid still comes back only after the whole range was gone through."""

    def __init__(self, uids: UidRange, state_file: Path) -> None:
        self._range = uids
        self._state_file = state_file
        self._next: int | None = None  # position in the range of the next uid to try, once read
        self._ahead = 0  # how far `job-uids` names a position beyond `_next`

    def allocate(self, in_use: set[int]) -> int:
        size = self._range.last - self._range.first + 1
        if self._next is None:
            self._next, self._ahead = self._read(size), 0
        for i in range(size):
            pos = (self._next + i) % size
            uid = self._range.first + pos
            if uid not in in_use:
                self._next = (pos + 1) % size
                self._ahead -= i + 1
                if self._ahead < 0:  # a restart would start at or before this uid: write further on
                    reserve = min(UID_RESERVE, size // 8)
                    self._write(self._range.first + (self._next + reserve) % size)
                    self._ahead = reserve
                return uid
        raise ConfigError(f"local.job_uid_range: all {size} uids are held by attempts not cleaned up yet")

    def _read(self, size: int) -> int:
        try:
            return (int(self._state_file.read_text().strip()) - self._range.first) % size
        except (FileNotFoundError, ValueError):
            return 0

    def _write(self, uid: int) -> None:
        tmp = self._state_file.with_name(self._state_file.name + ".tmp")
        tmp.write_text(f"{uid}\n")
        os.replace(tmp, self._state_file)


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    os.chown(path, uid, gid, follow_symlinks=False)
    for top, subdirs, files in os.walk(path):
        for name in (*subdirs, *files):
            with contextlib.suppress(FileNotFoundError):
                os.chown(os.path.join(top, name), uid, gid, follow_symlinks=False)


def secure_layout(state_dir: Path, attempts_dir: Path, out_root: Path, cache_dir: Path) -> None:
    """Modes of the shared directories (module docstring); run at start and before each launch."""
    for d, mode in ((state_dir, 0o711), (attempts_dir, 0o711), (out_root, 0o711), (cache_dir, 0o700)):
        d.mkdir(parents=True, exist_ok=True)
        os.chmod(d, mode)


def hand_over(root: Path, read_only: tuple[Path, ...], writable: tuple[Path, ...], out_dir: Path, uid: int) -> None:
    """Give the attempt's uid its own directories and read access to its read-only ones."""
    os.chown(root, 0, uid)
    os.chmod(root, 0o710)  # noqa: S103 - group U: the attempt's own uid alone
    for d in read_only:
        d.mkdir(exist_ok=True)
        os.chown(d, 0, uid)
        os.chmod(d, 0o750)  # noqa: S103 - group U reads, nobody else
    for d in (*writable, out_dir):
        d.mkdir(exist_ok=True)
        _chown_tree(d, uid, uid)
        os.chmod(d, 0o700)


def take_back(out_dir: Path) -> None:
    """FORGE_OUT_DIR is root's between attempts: no later holder of the uid can read it."""
    if out_dir.exists():
        _chown_tree(out_dir, 0, 0)
        os.chmod(out_dir, 0o700)


UID_LINE = b"\nUid:\t"
STATUS_HEAD = 4096  # /proc/<pid>/status's Uid: line comes in its first few hundred bytes


def _uid_of(pid: str) -> int | None:
    """The real uid of `pid` from /proc/<pid>/status (a process that made itself undumpable shows
    root as the owner of /proc/<pid>, so the directory's owner will not do), or None if gone."""
    try:
        fd = os.open(f"/proc/{pid}/status", os.O_RDONLY)
    except OSError:
        return None
    try:
        head = os.read(fd, STATUS_HEAD)
    except OSError:
        return None
    finally:
        os.close(fd)
    start = head.find(UID_LINE)
    if start < 0:
        return None
    start += len(UID_LINE)
    end = head.find(b"\t", start)
    try:
        return int(head[start:end])
    except ValueError:
        return None


def kill_uid(uid: int) -> int:
    """SIGKILL every process running as `uid` (what escaped the attempt's process group too).

    Once per cleanup, over every process of the node: raw reads of the status files' heads, not
    text decoding of all their lines (this scan was half of the executor's CPU per trivial job)."""
    killed = 0
    with os.scandir("/proc") as entries:
        pids = [e.name for e in entries if e.name.isdigit()]
    for pid in pids:
        if _uid_of(pid) == uid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(pid), signal.SIGKILL)
                killed += 1
    return killed
