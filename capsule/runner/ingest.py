"""Streaming the journal to the control plane's IngestService.Report, forever, until drained.

The sender owns no data: it reads records from the journal, sends them in batches, and moves the
journal's acknowledged cursor when ReportResponse.acked_seq arrives. After any failure it reconnects
with backoff (capped at ~2 s), asks GetCursor where the server stands, and resends from there. At
most ``window_records`` records are in flight; beyond that it waits for acks, and the journal on
disk is the buffer. Training never waits for the network.

Two things a trivial attempt would otherwise pay for on both ends:
- A journal this process created (``Journal.fresh``) holds nothing a server can have, so the first
  connection starts at seq 1 without asking GetCursor; every later one asks. (Were the server
  ahead, say of a wiped scratch directory's records, it skips what it has and answers its cursor,
  which the journal clamps, as GetCursor's answer would have been.)
- The journal's frames are the records' encoded bytes: a ReportRequest is written around them
  (``encode_report``) instead of parsing each record and encoding it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from betterproto2 import encode_varint
from grpclib.client import Channel, Stream
from grpclib.const import Cardinality, Status
from grpclib.exceptions import GRPCError
from sfpb.starforge.ingest import v1 as ingest

from .address import parse_address, tls_context
from .journal import Journal

REPORT_ROUTE = "/starforge.ingest.v1.IngestService/Report"
BACKOFF_START = 0.1
BACKOFF_CAP = 2.0
CURSOR_TIMEOUT = 10.0
# Records sent but not acknowledged for this long mean a dead connection: reconnect.
ACK_TIMEOUT = 20.0
# A failure is printed once, then at most this often while it lasts.
COMPLAIN_EVERY = 30.0
# Answers that retrying cannot change: the run token is not (or no longer) valid for this
# attempt, or the attempt has already ended. The sender stops instead of retrying until the drain
# deadline (the journal keeps the records).
FINAL_REFUSALS = (Status.PERMISSION_DENIED, Status.UNAUTHENTICATED)
# ReportRequest's fields on the wire: attempt_id = 1 and records = 2, both length-delimited.
ATTEMPT_ID_TAG = b"\x0a"
RECORDS_TAG = b"\x12"


def encode_report(attempt_id: str, payloads: list[bytes]) -> bytes:
    """A ReportRequest's bytes: the attempt id, then each journalled record's bytes as they are."""
    name = attempt_id.encode()
    parts = [ATTEMPT_ID_TAG, encode_varint(len(name)), name]
    for payload in payloads:
        parts += (RECORDS_TAG, encode_varint(len(payload)), payload)
    return b"".join(parts)


class EncodedReport:
    """A ReportRequest already encoded: what grpclib's codec asks of a message to send it."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def SerializeToString(self) -> bytes:  # the name protobuf's messages give it
        return self.data


class IngestSender:
    """Keeps one Report stream open and feeds it from the journal."""

    def __init__(
        self,
        journal: Journal,
        *,
        address: str,
        token: str,
        ca_pem: str = "",
        attempt_id: str,
        on_signal: Callable[[ingest.ControlSignal], None],
        window_records: int = 1024,
        batch_records: int = 128,
        batch_bytes: int = 1 << 20,
    ) -> None:
        self._journal = journal
        self._host, self._port = parse_address(address)
        self._ssl = tls_context(ca_pem)
        self._metadata = {"authorization": f"Bearer {token}"}
        self._attempt_id = attempt_id
        self._on_signal = on_signal
        self._window = window_records
        self._batch_records = batch_records
        self._batch_bytes = batch_bytes
        self._wake = asyncio.Event()  # the send loop: new records, acks, closing
        self._acked = asyncio.Event()  # drain(): the acknowledged cursor moved
        self._closing = False
        self._drain_deadline = float("inf")
        self._last_complaint = 0.0
        self._failures = 0
        self.connected = False
        self.refusal: str | None = None  # why the console refuses this attempt's records for good
        # a journal this process created: the first connection starts at seq 1 without GetCursor
        self._cursor_known = journal.fresh

    # -- called by the runner ----------------------------------------------------------------

    def notify(self) -> None:
        """A record was journalled."""
        self._wake.set()

    async def drain(self, timeout: float) -> bool:
        """Wait until everything journalled so far is acknowledged; False on timeout."""
        target = self._journal.last_seq
        self._drain_deadline = time.monotonic() + timeout
        while self._journal.acked_seq < target:
            if self.refusal is not None:
                return False
            left = self._drain_deadline - time.monotonic()
            if left <= 0:
                return False
            self._acked.clear()
            if self._journal.acked_seq >= target:
                break
            # asyncio.TimeoutError, not TimeoutError: they differ on Python 3.10.
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._acked.wait(), min(left, 0.5))
        return True

    def shorten_drain(self, seconds: float) -> None:
        """Give drain() at most ``seconds`` more (the container is being stopped)."""
        self._drain_deadline = min(self._drain_deadline, time.monotonic() + seconds)
        self._acked.set()

    def close(self) -> None:
        self._closing = True
        self._wake.set()

    # -- the connection loop -----------------------------------------------------------------

    async def run(self) -> None:
        backoff = BACKOFF_START
        while not self._closing:
            channel = Channel(self._host, self._port, ssl=self._ssl)
            try:
                await self._session(channel)
            except asyncio.CancelledError:
                raise
            except GRPCError as exc:
                if exc.status in FINAL_REFUSALS:
                    self._refused(exc)
                    return
                if not self._closing:
                    self._complain(exc)
            except Exception as exc:
                if not self._closing:
                    self._complain(exc)
            finally:
                if self.connected:
                    backoff = BACKOFF_START  # it worked for a while: retry promptly
                self.connected = False
                channel.close()
            if self._closing:
                return
            await asyncio.sleep(backoff * random.uniform(0.8, 1.2))
            backoff = min(backoff * 2, BACKOFF_CAP)

    async def _session(self, channel: Channel) -> None:
        if not self._cursor_known:
            stub = ingest.IngestServiceStub(channel, metadata=self._metadata)
            cursor = await stub.get_cursor(ingest.GetCursorRequest(attempt_id=self._attempt_id), timeout=CURSOR_TIMEOUT)
            self._ack(cursor.acked_seq)
        self._cursor_known = False  # a later session follows a failure: it asks
        async with channel.request(
            REPORT_ROUTE,
            Cardinality.STREAM_STREAM,
            EncodedReport,
            ingest.ReportResponse,
            metadata=self._metadata,
        ) as stream:
            await stream.send_request()
            if self._failures:
                print(f"starforge: reconnected to the console at {self._host}:{self._port}", file=sys.stderr)
            self._failures = 0
            self.connected = True
            receiver = asyncio.ensure_future(self._receive(stream))
            try:
                await self._send_loop(stream, receiver)
            finally:
                if not receiver.done():
                    receiver.cancel()
                    await asyncio.gather(receiver, return_exceptions=True)

    async def _send_loop(
        self, stream: Stream[EncodedReport, ingest.ReportResponse], receiver: asyncio.Future[None]
    ) -> None:
        next_seq = self._journal.acked_seq + 1
        last_progress = time.monotonic()
        acked_before = self._journal.acked_seq
        while True:
            if receiver.done():
                receiver.result()  # raises the stream's error, if any
                raise ConnectionError("the console closed the report stream")
            if self._journal.acked_seq > acked_before:
                acked_before = self._journal.acked_seq
                last_progress = time.monotonic()
            next_seq = max(next_seq, self._journal.acked_seq + 1)
            in_flight = next_seq - 1 - self._journal.acked_seq
            if self._closing and self._journal.acked_seq >= self._journal.last_seq:
                await self._finish(stream, receiver)
                return
            if in_flight and time.monotonic() - last_progress > ACK_TIMEOUT:
                raise TimeoutError(f"no acknowledgement from the console for {ACK_TIMEOUT:.0f} s")
            room = self._window - in_flight
            if room > 0 and next_seq <= self._journal.last_seq:
                batch = self._journal.read(
                    next_seq, max_records=min(room, self._batch_records), max_bytes=self._batch_bytes
                )
                request = EncodedReport(encode_report(self._attempt_id, [payload for _seq, payload in batch]))
                # HTTP/2 flow control can block a send on a dead peer: bound it like an ack.
                await asyncio.wait_for(stream.send_message(request), ACK_TIMEOUT)
                next_seq = batch[-1][0] + 1
                continue
            self._wake.clear()
            waiter = asyncio.ensure_future(self._wake.wait())
            waiting: list[asyncio.Future[Any]] = [waiter, receiver]
            await asyncio.wait(waiting, timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()

    async def _finish(
        self, stream: Stream[EncodedReport, ingest.ReportResponse], receiver: asyncio.Future[None]
    ) -> None:
        """Half-close the stream and give the server a moment to end it cleanly."""
        try:
            await stream.end()
            await asyncio.wait_for(asyncio.shield(receiver), 2.0)
        except Exception:  # noqa: S110 - everything is acknowledged; a messy close loses nothing
            pass

    async def _receive(self, stream: Stream[EncodedReport, ingest.ReportResponse]) -> None:
        while True:
            response = await stream.recv_message()
            if response is None:
                return
            self._ack(response.acked_seq)
            if response.signal != ingest.ControlSignal.UNSPECIFIED:
                self._on_signal(response.signal)

    def _ack(self, seq: int) -> None:
        before = self._journal.acked_seq
        self._journal.ack(seq)
        if self._journal.acked_seq != before:
            self._wake.set()
            self._acked.set()

    def _refused(self, exc: GRPCError) -> None:
        self.refusal = f"{exc.status.name}: {exc.message or 'refused'}"
        self.connected = False
        print(
            f"starforge: the console refuses this attempt's records ({self.refusal}); "
            f"{self._journal.unacked} records stay in the journal; no further retries",
            file=sys.stderr,
            flush=True,
        )
        self._acked.set()  # drain() returns at once

    def _complain(self, exc: BaseException) -> None:
        self._failures += 1
        now = time.monotonic()
        if self._failures == 1 or now - self._last_complaint >= COMPLAIN_EVERY:
            self._last_complaint = now
            unacked = self._journal.unacked
            print(
                f"starforge: console at {self._host}:{self._port} unreachable ({_describe(exc)}); "
                f"training continues, {unacked} records wait in the journal; retrying",
                file=sys.stderr,
                flush=True,
            )


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    status = getattr(exc, "status", None)
    if status is not None:
        message = getattr(exc, "message", None) or ""
        text = f"{getattr(status, 'name', status)}: {message}".rstrip(": ")
    return text if len(text) <= 200 else text[:197] + "..."
