"""IngestService servicer: batches from the capsule -> telemetry.ingest -> acks and control signals.

A Report stream is read and answered concurrently: every batch gets its ack, and a stop or pause
requested for the job is pushed to the capsule at once on the open stream (a job that prints
nothing still hears it), not only in the answer to its next batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session
from starforge_api.ingest.v1 import ingest_service_pb2 as pb
from starforge_api.ingest.v1 import ingest_service_pb2_grpc as pb_grpc

from common import errors
from control import auth, diagnosis, metrics
from control.context import Context
from control.db.group_commit import GroupCommit
from control.ledger import jobs
from control.ledger import state_machine as sm
from control.telemetry import bounds, ingest, ingest_group
from control.telemetry.ledger_heads import PeriodicReads

MAX_RECORDS_PER_BATCH = 5000
# One group commit of telemetry batches: at most this many batches (one per attempt, the others
# wait for the next group) and records; a batch larger than the records bound goes alone.
GROUP_MAX_BATCHES = 256
GROUP_MAX_RECORDS = MAX_RECORDS_PER_BATCH
SIGNAL_POLL_SECONDS = 5.0


@dataclass
class _Stream:
    attempt_id: str = ""
    job_id: str = ""
    acked: int = 0
    signalled: int = pb.CONTROL_SIGNAL_UNSPECIFIED


def _pending_signal(s: Session, attempt_id: str) -> int:
    """The signal the attempt's run should get now: its job's desired stop or pause, while active."""
    return _signal(*jobs.attempt_state_and_desired(s, attempt_id))


def _pending_signals(s: Session, *, attempt_ids: list[str]) -> dict[str, int]:
    """`_pending_signal` of each attempt that exists, in one query per 500."""
    out: dict[str, int] = {}
    for i in range(0, len(attempt_ids), 500):
        for attempt_id, state, desired in jobs.attempts_state_and_desired(s, attempt_ids[i : i + 500]):
            out[attempt_id] = _signal(state, desired)
    return out


def _signal(attempt_state: int, desired: int) -> int:
    if attempt_state not in sm.ACTIVE or desired not in (sm.STOP, sm.PAUSE):
        return pb.CONTROL_SIGNAL_UNSPECIFIED
    return pb.CONTROL_SIGNAL_STOP if desired == sm.STOP else pb.CONTROL_SIGNAL_PAUSE


def _segments(records: list[pb.Record]) -> list[list[pb.Record]]:
    """`records` split before each record that ends the attempt, so that its diagnosis can read the
    lines stored before it, outside the transaction that stores it."""
    out: list[list[pb.Record]] = [[]]
    for rec in records:
        if bounds.is_ending(rec) and out[-1]:
            out.append([])
        out[-1].append(rec)
    return [seg for seg in out if seg]


def _merge(total: ingest.Applied | None, part: ingest.Applied) -> ingest.Applied:
    if total is None:
        return part
    total.acked_seq, total.signal, total.job_id = part.acked_seq, part.signal, part.job_id
    total.transitions += part.transitions
    total.logs_added += part.logs_added
    total.metrics_added += part.metrics_added
    total.log_segments += part.log_segments
    for kind, n in part.kinds.items():
        total.kinds[kind] = total.kinds.get(kind, 0) + n
    return total


class IngestServicer(pb_grpc.IngestServiceServicer):
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.limits = bounds.IngestLimits.of(ctx.cfg)
        # the stop or pause each stream's run should get, read for all the streams at once
        self.signals: PeriodicReads[int] = PeriodicReads(
            lambda ids: ctx.db.run(functools.partial(_pending_signals, attempt_ids=ids), background=True),
            SIGNAL_POLL_SECONDS,
        )
        # telemetry batches of all the streams, stored together (telemetry.ingest_group)
        self.group = GroupCommit(
            ctx.db,
            self._store_group,
            max_batch=GROUP_MAX_BATCHES,
            weigh=lambda b: len(b.records) + 1,
            max_weight=GROUP_MAX_RECORDS,
        )

    def _store_group(self, s: Session, batches: Sequence[ingest_group.Batch]) -> list[ingest_group.Result]:
        return ingest_group.store(s, batches, self.ctx.masks.for_ids, self.limits)

    async def _apply(self, attempt_id: str, records: list[pb.Record], scope_attempt_id: str) -> ingest.Applied:
        """Store a batch and publish it (`_publish`): telemetry with the other streams' batches
        waiting (`ingest_group`), else (or when the group hands it back) alone, in `_apply_alone`."""
        if not any(rec.WhichOneof("body") == "lifecycle" for rec in records):
            ingest.check_scope(attempt_id, scope_attempt_id)
            done = await self.group.submit(ingest_group.Batch(attempt_id, records, scope_attempt_id), self._published)
            if isinstance(done, Exception):
                raise done
            if done is not None:
                return done
        applied = await self._apply_alone(attempt_id, records, scope_attempt_id)
        self._publish(applied)
        return applied

    def _published(self, result: ingest_group.Result) -> None:
        """A group's batch, as soon as its commit is answered (`GroupCommit`'s `then`): one turn
        of the event loop sooner than its stream's reader could publish it."""
        if isinstance(result, ingest.Applied):
            self._publish(result)

    def _publish(self, applied: ingest.Applied) -> None:
        """What follows a stored batch at once: its lines to the job's in-memory tail, its
        followers and watchers woken, the records counted."""
        for kind, n in applied.kinds.items():
            metrics.INGEST_RECORDS.labels(kind).inc(n)
        self._to_tails(applied)
        if applied.logs_added:
            self.ctx.notifier.notify(f"logs:{applied.job_id}")
        if applied.transitions:
            self.ctx.notifier.notify(applied.job_id, f"logs:{applied.job_id}", "schedule", "reconcile")

    async def _apply_alone(self, attempt_id: str, records: list[pb.Record], scope_attempt_id: str) -> ingest.Applied:
        """Store a batch in a transaction of its own; before a record that ends the attempt, read the
        log tail and diagnose it in a worker thread (bounded input, a time limit), then store the
        record with that evidence. A clean exit (code 0) has nothing to diagnose: no tail is read."""
        total: ingest.Applied | None = None
        for seg in _segments(records) or [[]]:  # an empty batch still gets its ack and signal
            evidence: dict[int, diagnosis.LogEvidence] = {}
            if seg and bounds.needs_diagnosis(seg[0]):
                tail = await self.ctx.db.run(
                    functools.partial(
                        ingest.tail_for_diagnosis, attempt_id=attempt_id, scope_attempt_id=scope_attempt_id
                    )
                )
                evidence[seg[0].seq] = await diagnosis.read_log_in_worker(tail, self.ctx.cfg.diagnosis_timeout_seconds)
            part = await self.ctx.db.run(
                functools.partial(
                    ingest.apply_records,
                    attempt_id=attempt_id,
                    records=seg,
                    # a run token without an attempt (none is issued so) matches no attempt
                    scope_attempt_id=scope_attempt_id,
                    masks=self.ctx.masks.for_ids,
                    limits=self.limits,
                    evidence=evidence,
                )
            )
            total = _merge(total, part)
        assert total is not None
        return total

    def _to_tails(self, applied: ingest.Applied) -> None:
        """The committed lines to the job's in-memory tail, before its followers are woken; a job
        or attempt that ended leaves it (its followers read what is left from the ledger)."""
        tails = self.ctx.log_tails
        for attempt_number, first_offset, rows in applied.log_segments:
            tails.add(applied.job_id, attempt_number, first_offset, rows)
        if any(t.to_state in sm.TERMINAL for t in applied.transitions):
            tails.forget(applied.job_id)

    async def _read(
        self,
        request_iterator: AsyncIterator[pb.ReportRequest],
        principal: auth.Principal,
        st: _Stream,
        out: asyncio.Queue[pb.ReportResponse | None],
    ) -> None:
        async for batch in request_iterator:
            if not batch.attempt_id:
                raise errors.InvalidArgument("attempt_id is required on every ReportRequest")
            if st.attempt_id and batch.attempt_id != st.attempt_id:
                raise errors.InvalidArgument("one Report stream carries one attempt")
            st.attempt_id = batch.attempt_id
            if len(batch.records) > MAX_RECORDS_PER_BATCH:
                raise errors.InvalidArgument(f"at most {MAX_RECORDS_PER_BATCH} records per batch")
            applied = await self._apply(st.attempt_id, list(batch.records), principal.attempt_id or "")
            st.job_id, st.acked = applied.job_id, applied.acked_seq
            if applied.signal:
                st.signalled = applied.signal
            await out.put(pb.ReportResponse(acked_seq=applied.acked_seq, signal=applied.signal))  # type: ignore[arg-type]
        await out.put(None)

    async def _watch(self, st: _Stream, out: asyncio.Queue[pb.ReportResponse | None]) -> None:
        """Sends the run a stop or pause its job was asked: at once when this process changed the
        job (notified), else when the signals read for all the streams here every
        SIGNAL_POLL_SECONDS show one (another replica changed it)."""
        while not st.job_id:  # noqa: ASYNC110 (set by the stream's reader, which stores the first batch)
            await asyncio.sleep(0.2)
        attempt_id = st.attempt_id
        self.signals.watch(attempt_id)
        try:
            while True:
                if await self.ctx.notifier.wait(st.job_id, SIGNAL_POLL_SECONDS):
                    signal = await self.ctx.db.run(lambda s: _pending_signal(s, attempt_id))
                else:
                    signal = self.signals.get(attempt_id) or pb.CONTROL_SIGNAL_UNSPECIFIED
                if signal and signal != st.signalled:
                    st.signalled = signal
                    await out.put(pb.ReportResponse(acked_seq=st.acked, signal=signal))  # type: ignore[arg-type]
        finally:
            self.signals.unwatch(attempt_id)

    async def Report(
        self, request_iterator: AsyncIterator[pb.ReportRequest], context: Any
    ) -> AsyncIterator[pb.ReportResponse]:
        principal = auth.current()
        st = _Stream()
        out: asyncio.Queue[pb.ReportResponse | None] = asyncio.Queue(maxsize=64)
        reader = asyncio.create_task(self._read(request_iterator, principal, st, out))
        watcher = asyncio.create_task(self._watch(st, out))
        try:
            while True:
                getter = asyncio.ensure_future(out.get())
                await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():
                    getter.cancel()
                    if reader.exception() is not None:
                        raise reader.exception()  # type: ignore[misc]
                    continue  # the reader finished after queueing its last items
                item = getter.result()
                if item is None:
                    return
                yield item
        finally:
            watcher.cancel()
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader

    async def GetCursor(self, request: pb.GetCursorRequest, context: Any) -> pb.GetCursorResponse:
        principal = auth.current()

        def read(s: Session) -> int:
            ingest.check_scope(request.attempt_id, principal.attempt_id or "")
            attempt = jobs.get_attempt(s, request.attempt_id)
            return ingest.cursor_for(s, attempt, for_update=False).acked_seq

        return pb.GetCursorResponse(acked_seq=await self.ctx.db.run(read))
