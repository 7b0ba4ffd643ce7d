"""Recorded processes: identify them by PID *and* start time, kill them only by that record.

A PID alone may have been reused by an unrelated process since it was written down, so every
record also keeps the kernel's start time (field 22 of /proc/PID/stat); a process whose start time
differs is not ours and is never signalled.
"""

from __future__ import annotations

import os
import pathlib
import signal
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Proc:
    """A process this tooling started."""

    name: str
    pid: int
    start_time: int

    @classmethod
    def of(cls, name: str, pid: int) -> Proc:
        start = start_time(pid)
        if start is None:
            raise ProcessLookupError(f"{name} (pid {pid}) is not running")
        return cls(name=name, pid=pid, start_time=start)

    def alive(self) -> bool:
        """True while this very process (not a reuse of its PID) exists and is not a zombie."""
        return start_time(self.pid) == self.start_time and _state(self.pid) not in (None, "Z", "X")

    def signal(self, sig: signal.Signals) -> bool:
        """Send `sig` if the process is still ours; False when it is gone."""
        if not self.alive():
            return False
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            return False
        return True


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after its last ')'.
    return raw[raw.rindex(")") + 2 :].split()


def start_time(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def _state(pid: int) -> str | None:
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def parent_of(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields else None


def children_of(pid: int) -> list[int]:
    """Host PIDs whose parent is `pid` (found through /proc, not by name)."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit() and parent_of(int(entry.name)) == pid:
            found.append(int(entry.name))
    return found


def namespace_pid(pid: int) -> int | None:
    """The PID of host process `pid` inside its own (innermost) PID namespace."""
    try:
        status = pathlib.Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            return int(line.split()[-1])
    return None


def pid_namespace(pid: int) -> str | None:
    """The PID namespace of `pid` (e.g. "pid:[4026532]"), or None when it is gone."""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def members_of(namespace: str) -> list[int]:
    """Host PIDs of every process in PID namespace `namespace` (used to prove a stop was complete)."""
    members = []
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit() and pid_namespace(int(entry.name)) == namespace:
            members.append(int(entry.name))
    return members


def wait_gone(procs: list[Proc], timeout: float) -> list[Proc]:
    """Wait until none of `procs` is alive; return those still alive after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        left = [proc for proc in procs if proc.alive()]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)
