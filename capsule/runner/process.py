"""The training command as a process group.

The command runs in its own session (hence its own process group), so a stop reaches everything it
started (torchrun workers, data loaders, shell pipelines) with one ``killpg``, and the runner's own
signals (a terminal's Ctrl-C) do not hit the training code directly.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
from collections.abc import Mapping


def exit_status(returncode: int) -> tuple[int, int]:
    """(exit code as a shell reports it, terminating signal or 0) of a Popen returncode."""
    if returncode < 0:
        return 128 - returncode, -returncode
    return returncode, 0


class TrainingProcess:
    """Starts the command with piped stdout/stderr and signals its whole process group."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc
        self.pid = proc.pid

    @classmethod
    async def start(cls, argv: list[str], *, cwd: pathlib.Path, env: Mapping[str, str]) -> TrainingProcess:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=str(cwd),
            env=dict(env),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        return cls(proc)

    @property
    def stdout(self) -> asyncio.StreamReader:
        assert self._proc.stdout is not None
        return self._proc.stdout

    @property
    def stderr(self) -> asyncio.StreamReader:
        assert self._proc.stderr is not None
        return self._proc.stderr

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    async def wait(self) -> int:
        return await self._proc.wait()

    def signal_group(self, sig: int) -> bool:
        """Send ``sig`` to the command's process group; False when nothing is left in it."""
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            return False
        except PermissionError:
            return False
        return True

    async def stop(self, grace: float) -> bool:
        """SIGTERM the group, SIGKILL it after ``grace`` seconds. True when SIGKILL was needed."""
        self.signal_group(signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(self._proc.wait()), grace)
        except asyncio.TimeoutError:  # not TimeoutError: they differ on Python 3.10
            self.signal_group(signal.SIGKILL)
            return True
        return False

    def kill_leftovers(self) -> bool:
        """After the command exited: kill what it left running in its group (they hold our pipes)."""
        return self.signal_group(signal.SIGKILL)
