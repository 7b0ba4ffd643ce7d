"""Reconciliation: keep the ledger true to what the executors report.

On start and then every few seconds:
- SUBMITTED attempts whose dispatch lease ran out (a replica died mid-dispatch, or a launch hit a
  transient error) are observed: found -> the ledger catches up; not found -> the stored
  LaunchRequest is sent again (launch is idempotent per attempt id);
- PENDING/RUNNING attempts are observed and advanced; an attempt that ended without the capsule
  reporting it (killed, integrity failure, OOM) is ended from the executor's observation, and the
  executor's last lines go into the job's log;
- jobs with a pending stop or pause get their attempt stopped on the backend;
- ended attempts are cleaned up (everything but FORGE_OUT_DIR).

Observe and Stop of one attempt are repeated on the schedules of `backoff.py` (per attempt,
exponential with jitter and a cap), not at the speed the loop turns: the loop wakes on every
notification, and a stop that keeps answering stopped=false used to be sent again at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session
from starforge_api.executor.v1 import executor_service_pb2 as ex
from starforge_api.forgelet.v1 import node_pb2
from starforge_api.job.v1 import job_state_pb2 as st

from common import errors
from control import diagnosis, launch_secrets, nodes
from control.context import Context
from control.db import models as m
from control.ledger import jobs, outcomes, platform
from control.ledger import state_machine as sm
from control.scheduler import backoff
from control.scheduler.dispatch import Scheduler, closed_fleets, note_image_digest, take_lease
from control.telemetry import bounds, ingest

log = logging.getLogger("starforge.reconcile")
OBSERVE_BATCH = 200
# An ended process may still be draining its journal; give ingest this long before the
# executor's observation decides the outcome.
EXIT_GRACE_SECONDS = 3.0
FLEET_CHECK_SECONDS = 10.0


class Reconciler:
    def __init__(self, ctx: Context, scheduler: Scheduler) -> None:
        self.ctx = ctx
        self.scheduler = scheduler
        self._ended_seen: dict[str, float] = {}
        self._last_fleet_check = 0.0
        self._stopping: set[str] = set()
        self._stops = backoff.Tracker(backoff.STOP)
        self._observes = backoff.Tracker(backoff.OBSERVE)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.tick()
            except errors.Unavailable as e:  # the database is down: say so, without a traceback
                log.warning("reconcile cycle skipped: %s", e.message)
            except Exception:
                log.exception("reconcile cycle failed")
            await self.ctx.notifier.wait("reconcile", self.ctx.cfg.reconcile_interval_seconds)

    async def serve_stop_requests(self, stop: asyncio.Event) -> None:
        """Stop at once the attempts the API asked to stop (`Context.stop_requests`), until `stop`."""
        while not stop.is_set():
            attempt_id, fleet = await self.ctx.stop_requests.get()
            self.scheduler.spawn(self.stop_attempt(attempt_id, fleet))

    async def tick(self) -> None:
        now = time.time()
        if now - self._last_fleet_check > FLEET_CHECK_SECONDS:
            self._last_fleet_check = now
            await self.ctx.executors.check_all()
        active = await self.ctx.db.run(_active_attempts)
        active_ids = {a[0] for a in active}
        self._stops.keep_only(active_ids)
        self._observes.keep_only(active_ids)
        by_fleet: dict[str, list[tuple[str, int, float, str]]] = defaultdict(list)
        for a in active:
            by_fleet[a[1]].append((a[0], a[2], a[3], a[4]))
        await asyncio.gather(*(self._fleet(fleet, rows, now) for fleet, rows in by_fleet.items()))
        lost = await self.ctx.db.run(lambda s: nodes.mark_lost(s, self.ctx.cfg.node_timeout_seconds))
        for t in lost:
            self.ctx.notifier.notify(t.job_id, "schedule")
        await self._platform_stops()
        await self._stop_requested()
        await self._cleanup()

    async def _fleet(self, fleet: str, rows: list[tuple[str, int, float, str]], now: float) -> None:
        status = self.ctx.executors.status.get(fleet)
        if status is None or status.misconfigured:
            return
        # SUBMITTED attempts still held by a live dispatch are left alone, and an attempt whose
        # last observations changed nothing waits for its turn (backoff.OBSERVE).
        ids = [
            aid
            for aid, state, lease_until, _ in rows
            if (state != sm.SUBMITTED or lease_until < now) and self._observes.due(aid, now)
        ]
        for i in range(0, len(ids), OBSERVE_BATCH):
            batch = ids[i : i + OBSERVE_BATCH]
            for aid in batch:
                self._observes.tried(aid, now)
            try:
                observations = await self.ctx.executors.observe(fleet, batch)
            except errors.StarforgeError as e:
                log.warning("observe on fleet %s failed: %s", fleet, e.message)
                return
            for o in observations:
                if await self._apply(fleet, o, now):
                    self._observes.reset(o.attempt_id)  # it moves: look again next cycle

    async def _apply(self, fleet: str, o: ex.Observation, now: float) -> bool:
        """Bring the ledger to the observation; True when the ledger changed."""
        state = await self.ctx.db.run(lambda s: jobs.get_attempt(s, o.attempt_id).state)
        if o.not_found:
            if state == sm.SUBMITTED:
                await self._relaunch(fleet, o.attempt_id, now)
            elif state in (sm.PENDING, sm.RUNNING):
                await self._end(o, now, lost=True)
                return True
            return False
        if o.state in (sm.PENDING, sm.RUNNING):
            self._ended_seen.pop(o.attempt_id, None)
            # SUBMITTED -> PENDING is the Launch's answer, not an observation's: an executor may
            # say PENDING for a start it cannot confirm (its node is unreachable); an attempt still
            # SUBMITTED is launched again (idempotently) if the backend turns out not to have it,
            # and fails as node lost if its node never comes back (so the node is noted now).
            if state == sm.SUBMITTED and o.state == sm.PENDING:
                if o.node:
                    await self.ctx.db.run(lambda s: _note_node(s, o.attempt_id, o.node))
                return False
            if o.state != state and state in sm.ACTIVE and sm.path_to(state, o.state):
                job_id = await self.ctx.db.run(lambda s: self._advance(s, o))
                self.ctx.notifier.notify(job_id)  # followers (WatchJob) see the transition now, not at their poll
                return True
            return False
        if o.state in (sm.SUCCEEDED, sm.FAILED, sm.STOPPED):
            first = self._ended_seen.setdefault(o.attempt_id, now)
            if now - first >= EXIT_GRACE_SECONDS:
                await self._end(o, now, lost=False)
                self._ended_seen.pop(o.attempt_id, None)
                return True
            # ended on the backend, its capsule may still report: look again soon (not backed off)
            return first == now
        return False

    def _advance(self, s: Session, o: ex.Observation) -> str:
        attempt = jobs.get_attempt(s, o.attempt_id, for_update=True)
        job = jobs.get_job(s, attempt.job_id, for_update=True)
        if attempt.state in sm.ACTIVE and o.state not in (attempt.state,):
            if o.backend_handle:
                attempt.backend_handle = o.backend_handle
            if o.node:
                attempt.node = o.node
            attempt.lease_owner, attempt.lease_until = "", 0.0
            note_image_digest(job, o.image_digest)
            jobs.advance(s, job, attempt, o.state, f"observed {sm.name(o.state)} on the backend")
        return job.id

    async def _end(self, o: ex.Observation, now: float, *, lost: bool) -> None:
        # the executor's tail is what the job printed: masked like its log lines (the job's secret
        # values), cut, and read by the diagnosis outside the transaction
        max_line = self.ctx.cfg.max_log_line_bytes
        mask = await self.ctx.db.run(lambda s: self.ctx.masks.for_attempt(s, jobs.get_attempt(s, o.attempt_id)))
        tail = [bounds.cut_line(mask(line), max_line) for line in o.log_tail]
        evidence = await diagnosis.read_log_in_worker(tail, self.ctx.cfg.diagnosis_timeout_seconds)

        def end(s: Session) -> str:
            attempt = jobs.get_attempt(s, o.attempt_id, for_update=True)
            if attempt.state not in sm.ACTIVE:
                return attempt.job_id
            job = jobs.get_job(s, attempt.job_id, for_update=True)
            note_image_digest(job, o.image_digest)
            if tail:
                ingest.system_lines(s, attempt, tail, max_line_bytes=max_line)
            if lost:
                outcomes.finish_attempt(
                    s,
                    job,
                    attempt,
                    exit_code=None,
                    known_class=st.FAILURE_CLASS_INFRA,
                    message=f"the executor of fleet {attempt.fleet} has no trace of attempt {attempt.id}",
                )
                return job.id
            code = o.exit_code if o.HasField("exit_code") else None
            outcomes.finish_attempt(
                s,
                job,
                attempt,
                exit_code=code,
                known_class=o.failure_class,
                log_tail=tail,
                evidence=evidence,
                stopped_by_backend=o.state == sm.STOPPED,
                message="stopped on the backend" if o.state == sm.STOPPED else "",
            )
            return job.id

        job_id = await self.ctx.db.run(end)
        self.ctx.notifier.notify(job_id, "schedule")

    def _launch_with_secrets(self, s: Session, attempt: m.Attempt) -> bytes | None:
        """The stored LaunchRequest with a fresh run token and its secrets resolved again (they are
        never stored); None when a secret it names is gone, and the attempt fails as a precheck."""
        return launch_secrets.send_form_or_fail(s, attempt, self.ctx.keyring)

    async def _relaunch(self, fleet: str, attempt_id: str, now: float) -> None:
        def lease(s: Session) -> tuple[str, bytes | None] | None:
            if not take_lease(s, attempt_id, self.ctx.replica_id, now):
                return None
            a = jobs.get_attempt(s, attempt_id)
            # The ledger keeps no credentials: this send gets a fresh run token (the first
            # send's stays valid for this attempt: it may have reached the executor) and the
            # secrets' current values.
            return a.job_id, self._launch_with_secrets(s, a)

        got = await self.ctx.db.run(lease)
        if got is not None and got[1] is not None:
            log.info("re-sending launch of %s to fleet %s", attempt_id, fleet)
            await self.scheduler.launch(attempt_id, got[0], fleet, got[1])
        elif got is not None:
            self.ctx.notifier.notify(got[0], "schedule")

    async def _platform_stops(self) -> None:
        """Windows and drains: stop or pause what runs on closed fleets, requeue what may run again."""

        def apply(s: Session) -> tuple[list[tuple[str, str]], list[str]]:
            closed = closed_fleets(s, self.ctx)
            return platform.request_stops(s, closed, nodes.draining_attempts(s)), platform.requeue(s, closed)

        stops, requeued = await self.ctx.db.run(apply)
        for attempt_id, fleet in stops:
            self.scheduler.spawn(self.stop_attempt(attempt_id, fleet))
        if requeued:
            self.ctx.notifier.notify("schedule", *requeued)

    async def _stop_requested(self) -> None:
        rows = await self.ctx.db.run(_stop_targets)
        for attempt_id, fleet in rows:
            if attempt_id in self._stopping:
                continue
            self.scheduler.spawn(self.stop_attempt(attempt_id, fleet))

    async def stop_attempt(self, attempt_id: str, fleet: str) -> None:
        """Stop an attempt on its backend: one call at a time per attempt, repeated (until the
        attempt is seen ended) on the backoff.STOP schedule whatever the answer was."""
        if attempt_id in self._stopping or not self._stops.due(attempt_id, time.time()):
            return
        self._stopping.add(attempt_id)
        self._stops.tried(attempt_id, time.time())
        try:
            await self.ctx.executors.stop(fleet, attempt_id, self.ctx.cfg.stop_grace_seconds)
        except errors.StarforgeError as e:
            log.warning("stop of %s failed (will retry): %s", attempt_id, e.message)
        finally:
            self._stopping.discard(attempt_id)
        self._observes.reset(attempt_id)  # its end is what the stop was for: look at once
        self.ctx.notifier.notify("reconcile")

    async def _cleanup(self) -> None:
        rows = await self.ctx.db.run(_uncleaned)
        for attempt_id, fleet in rows:
            try:
                await self.ctx.executors.cleanup(fleet, attempt_id)
            except errors.FailedPrecondition:
                continue  # still running on the backend; the next cycle stops or observes it
            except errors.StarforgeError as e:
                log.info("cleanup of %s deferred: %s", attempt_id, e.message)
                continue
            await self.ctx.db.run(_marker(attempt_id))


def _note_node(s: Session, attempt_id: str, node: str) -> None:
    """Record where a not yet confirmed attempt was placed; if that node is already lost, the
    attempt fails as node lost now (nodes.mark_lost handles the nodes lost later)."""
    attempt = jobs.get_attempt(s, attempt_id, for_update=True)
    if attempt.state != sm.SUBMITTED or attempt.node == node:
        return
    attempt.node = node
    row = s.get(m.Node, node)
    if row is not None and row.state == node_pb2.NODE_STATE_LOST:
        job = jobs.get_job(s, attempt.job_id, for_update=True)
        outcomes.finish_attempt(
            s,
            job,
            attempt,
            exit_code=None,
            known_class=st.FAILURE_CLASS_NODE_LOST,
            message=f"node lost: {node} went silent before the attempt was confirmed started",
        )


def _active_attempts(s: Session) -> list[tuple[str, str, int, float, str]]:
    # the columns alone, not ORM objects: a pass reads every active attempt
    cols = (m.Attempt.id, m.Attempt.fleet, m.Attempt.state, m.Attempt.lease_until, m.Attempt.job_id)
    return [tuple(r) for r in s.execute(select(*cols).where(m.Attempt.state.in_(sm.ACTIVE)))]  # type: ignore[misc]


def _stop_targets(s: Session) -> list[tuple[str, str]]:
    rows = s.execute(
        select(m.Attempt.id, m.Attempt.fleet)
        .join(m.Job, m.Job.id == m.Attempt.job_id)
        .where(m.Job.desired.in_((sm.STOP, sm.PAUSE)), m.Attempt.state.in_(sm.ACTIVE))
    ).all()
    return [(r[0], r[1]) for r in rows]


def _uncleaned(s: Session) -> list[tuple[str, str]]:
    rows = s.execute(
        select(m.Attempt.id, m.Attempt.fleet)
        .where(m.Attempt.state.not_in(sm.ACTIVE | {sm.QUEUED}), m.Attempt.cleaned_at.is_(None))
        .limit(100)
    ).all()
    return [(r[0], r[1]) for r in rows]


def _marker(attempt_id: str) -> Callable[[Session], None]:
    def mark(s: Session) -> None:
        a = s.get(m.Attempt, attempt_id)
        if a is not None:
            a.cleaned_at = time.time()

    return mark
