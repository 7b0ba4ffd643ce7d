"""The runner's report socket: SDK datagrams in, MetricBatch / SampleBatch records out.

An AF_UNIX SOCK_DGRAM socket keeps message boundaries and, with blocking senders, never drops: when
the runner falls behind, ``sendto`` in the training process blocks instead. The default name is a
Linux abstract-namespace address ("@starforge-<attempt_id>"): no path length limit, nothing to clean
up, reachable from any process in the container. Points arriving within ~50 ms are coalesced into
one record.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import pathlib
import re
import socket
from typing import Any

from sfpb.starforge.job import v1 as job

from .datagrams import DatagramParser
from .reporter import Reporter

FLUSH_SECONDS = 0.05
MAX_POINTS = 1000
MAX_SAMPLES = 64
# One SampleBatch record stays under the ingest service's 1 MiB record limit (a single sample is
# at most one ~200 KB datagram; UTF-8 takes at most 3 bytes per decoded character).
MAX_SAMPLE_CHARS = 128 * 1024
RECV_BUFFER = 1 << 20
RCVBUF_BYTES = 4 << 20
READS_PER_WAKEUP = 256


def socket_address(name: str) -> str:
    """Turn a FORGE_REPORT_SOCKET value into a socket address ("@x" = abstract namespace)."""
    return "\0" + name[1:] if name.startswith("@") else name


class TelemetryListener:
    """Receives report datagrams and journals them through the reporter."""

    def __init__(self, reporter: Reporter, *, attempt_id: str, scratch_dir: pathlib.Path) -> None:
        self._reporter = reporter
        self._parser = DatagramParser()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.setblocking(False)
        with contextlib.suppress(OSError):  # capped by net.core.rmem_max; best effort
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF_BYTES)
        self.name = self._bind(attempt_id, scratch_dir)
        self._buffer = bytearray(RECV_BUFFER)
        self._points: list[job.MetricPoint] = []
        self._samples: list[job.Sample] = []
        self._sample_chars = 0
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._path: pathlib.Path | None = None if self.name.startswith("@") else pathlib.Path(self.name)

    def _bind(self, attempt_id: str, scratch_dir: pathlib.Path) -> str:
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", attempt_id) or str(os.getpid())
        candidates = [f"@starforge-{safe}", f"@starforge-{safe}-{os.urandom(4).hex()}"]
        for name in candidates:
            try:
                self._sock.bind(socket_address(name))
                return name
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    continue
                break  # no abstract namespace here (not Linux, a sandbox): use a path
        path = scratch_dir / "report.sock"
        path.unlink(missing_ok=True)
        self._sock.bind(str(path))
        return str(path)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        loop.add_reader(self._sock.fileno(), self._on_readable)

    def _on_readable(self) -> None:
        for _ in range(READS_PER_WAKEUP):
            if not self._receive_one():
                return

    def _receive_one(self) -> bool:
        try:
            size = self._sock.recv_into(self._buffer)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return False
        self._handle(bytes(self._buffer[:size]))
        return True

    def _handle(self, data: bytes) -> None:
        parsed = self._parser.parse(data)
        for warning in parsed.warnings:
            self.flush()  # keep a warning after the points reported before it
            self._reporter.system(warning)
        self._points.extend(parsed.points)
        for sample in parsed.samples:
            chars = len(sample.prompt) + len(sample.completion)
            chars += sum(len(k) + len(v) for k, v in sample.extra.items())
            if self._samples and self._sample_chars + chars > MAX_SAMPLE_CHARS:
                self.flush()
            self._samples.append(sample)
            self._sample_chars += chars
        if len(self._points) >= MAX_POINTS or len(self._samples) >= MAX_SAMPLES:
            self.flush()
        elif (self._points or self._samples) and self._timer is None and self._loop is not None:
            self._timer = self._loop.call_later(FLUSH_SECONDS, self.flush)

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._points:
            points, self._points = self._points, []
            for start in range(0, len(points), MAX_POINTS):
                self._reporter.metrics(points[start : start + MAX_POINTS])
        if self._samples:
            samples, self._samples, self._sample_chars = self._samples, [], 0
            self._reporter.samples(samples)

    def drain(self) -> None:
        """Read whatever is still queued (the training command has exited) and flush it."""
        while self._receive_one():
            pass
        self.flush()

    def close(self) -> None:
        if self._loop is not None:
            self._loop.remove_reader(self._sock.fileno())
        self.flush()
        self._sock.close()
        if self._path is not None:
            self._path.unlink(missing_ok=True)

    def __enter__(self) -> TelemetryListener:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
