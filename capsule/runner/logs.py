"""Forwarding the training command's stdout/stderr: echo locally, journal as LogChunk records.

With a secret mask (masking.py) lines are masked before both; the echo is then written a line at
a time (a partial line waits for its newline), since a value may straddle two reads.

Lines are coalesced for up to ~50 ms (or 500 lines) into one record, so chatty training code costs
a few records per second rather than one per line, and a quiet one still shows up promptly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import BinaryIO

from sfpb.starforge.job import v1 as job

from .lines import ChunkBuffer, LineSplitter
from .reporter import Reporter

FLUSH_SECONDS = 0.05
READ_BYTES = 64 * 1024


class LogForwarder:
    """Pumps one pipe of the training command into the reporter."""

    def __init__(
        self,
        reporter: Reporter,
        stream: job.LogStream,
        echo: BinaryIO | None,
        observe: Callable[[list[str]], None] | None = None,
        mask: Callable[[str], str] | None = None,
    ) -> None:
        self._reporter = reporter
        self._mask = mask
        self._observe = observe
        self._stream = stream
        self._echo = echo
        self._splitter = LineSplitter()
        self._buffer = ChunkBuffer()
        self._timer: asyncio.TimerHandle | None = None

    async def pump(self, reader: asyncio.StreamReader) -> None:
        """Read until EOF; everything read is journalled when this returns."""
        try:
            while True:
                data = await reader.read(READ_BYTES)
                if not data:
                    break
                if self._mask is None:
                    self._write_echo(data)
                self._add(self._splitter.feed(data))
        finally:
            self._add(self._splitter.finish())
            self.flush()

    def _write_echo(self, data: bytes) -> None:
        if self._echo is None:
            return
        try:
            self._echo.write(data)
            self._echo.flush()
        except (OSError, ValueError):
            self._echo = None  # our own stdout is gone; keep forwarding to the console

    def _add(self, lines: list[str]) -> None:
        if self._mask is not None and lines:
            lines = [self._mask(line) for line in lines]
            self._write_echo("".join(f"{line}\n" for line in lines).encode())
        if self._observe is not None and lines:
            self._observe(lines)
        for chunk in self._buffer.add(lines):
            self._reporter.log(self._stream, chunk)
        if len(self._buffer) and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(FLUSH_SECONDS, self.flush)

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if len(self._buffer):
            self._reporter.log(self._stream, self._buffer.take())
