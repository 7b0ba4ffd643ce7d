"""A model test of the ledger: random sequences of submissions, launches, observations, stops,
pauses, resumes, retries, drains, window closes and crashes, driven through the ledger functions
(jobs, outcomes, platform, pipeline, nodes) on SQLite and PostgreSQL. After every step, every job's event history
must be a legal path of the one transition table that ends in the job's state, and a job or
attempt has a start time exactly when it went through RUNNING."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as hs
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import select
from sqlalchemy.orm import Session
from starforge_api.forgelet.v1 import node_pb2
from starforge_api.job.v1 import job_spec_pb2
from starforge_api.job.v1 import job_state_pb2 as st

from common import errors
from control import nodes
from control.db import models as m
from control.db.engine import Database
from control.ledger import jobs, outcomes, pipeline, platform
from control.ledger import state_machine as sm

FLEETS = ("east", "west")


class Crash(Exception):
    """Raised inside a transaction: the process died before it committed."""


def _columns() -> dict[str, object]:
    return {
        "project": "@alice/lab",
        "experiment": "exp",
        "method": "custom/custom",
        "pools": b"",
        "eligible_fleets": json.dumps(list(FLEETS)),
        "retry_budget": 1,
    }


def _current(s: Session, job_id: str) -> tuple[m.Job, m.Attempt | None]:
    job = jobs.get_job(s, job_id, for_update=True)
    return job, jobs.current_attempt(s, job)


PICK = hs.integers(min_value=0, max_value=7)


class LedgerModel(RuleBasedStateMachine):
    db: Database  # set by the test (one SQLite ledger for every example)

    @initialize()
    def start(self) -> None:
        self.run_id = uuid.uuid4().hex  # request ids are per owner: keep each run's apart
        self.submitted: dict[str, str] = {}  # request id -> job id
        self.mine: set[str] = set()
        # what the backends really said, to tell a true history from an invented one
        self.launched: set[str] = set()  # attempts whose launch was accepted
        self.seen_running: set[str] = set()  # attempts observed running
        for request, stages in (("", ()), ("r1", ("export",)), ("", ())):
            self._submit(request, stages)

    # -- submissions ------------------------------------------------------------------------------

    def _pick(self, pick: int, *states: int) -> str | None:
        """One of this run's jobs that is in one of `states` (the rules act on jobs that can take
        their action, so that short runs reach deep histories)."""
        ids = sorted(self.mine)
        current = self.db.run_sync(
            lambda s: dict(s.execute(select(m.Job.id, m.Job.state).where(m.Job.id.in_(ids))).all())
        )
        fitting = [j for j in ids if current.get(j) in states]
        return fitting[pick % len(fitting)] if fitting else None

    @rule(request=hs.sampled_from(["", "r1", "r2"]), stages=hs.sampled_from([(), ("export",)]))
    def submit(self, request: str, stages: tuple[str, ...]) -> None:
        self._submit(request, stages)

    def _submit(self, request: str, stages: tuple[str, ...]) -> None:
        key = f"{self.run_id}-{request}" if request else ""
        spec = job_spec_pb2.JobSpec(project="@alice/lab", experiment="exp", method="custom/custom")
        spec.then_stages.extend(stages)
        job_id = self.db.run_sync(
            lambda s: jobs.create_job(s, owner="alice", request_id=key, spec=spec, columns=_columns()).id
        )
        if key:
            assert self.submitted.setdefault(key, job_id) == job_id, "a retried submission made a second job"
        self.mine.add(job_id)
        children = self.db.run_sync(lambda s: list(s.scalars(select(m.Job.id).where(m.Job.parent_job_id == job_id))))
        self.mine.update(children)

    # -- the scheduler and the executors ----------------------------------------------------------

    @rule(pick=PICK, fleet=hs.sampled_from(FLEETS))
    def dispatch(self, pick: int, fleet: str) -> None:
        job_id = self._pick(pick, sm.QUEUED)
        if job_id is None:
            return

        def go(s: Session) -> None:
            job, _ = _current(s, job_id)
            if job.state == sm.QUEUED:  # (not_before is the scheduler's business, not the ledger's)
                jobs.new_attempt(s, job, fleet, f"dispatched to fleet {fleet}", now=time.time())

        self.db.run_sync(go)

    @rule(pick=PICK, accepted=hs.booleans())
    def launch(self, pick: int, accepted: bool) -> None:
        job_id = self._pick(pick, sm.SUBMITTED)
        if job_id is None:
            return

        def go(s: Session) -> str:
            job, attempt = _current(s, job_id)
            if attempt is None or attempt.state != sm.SUBMITTED:
                return ""
            if accepted:
                jobs.advance(s, job, attempt, sm.PENDING, "launched")
                return attempt.id
            outcomes.finish_attempt(
                s, job, attempt, exit_code=None, known_class=st.FAILURE_CLASS_PRECHECK, message="refused"
            )
            return ""

        self.launched.add(self.db.run_sync(go))

    @rule(pick=PICK, seen=hs.sampled_from(["running", "exit0", "exit1", "stopped", "infra"]))
    def observe(self, pick: int, seen: str) -> None:
        job_id = self._pick(pick, sm.PENDING, sm.RUNNING)
        if job_id is None:
            return

        def go(s: Session) -> str:
            job, attempt = _current(s, job_id)
            if attempt is None or attempt.state not in (sm.PENDING, sm.RUNNING):
                return ""  # SUBMITTED -> PENDING is the launch's answer, never an observation's
            if seen == "running":
                if attempt.state != sm.RUNNING:
                    jobs.advance(s, job, attempt, sm.RUNNING, "observed RUNNING")
                return attempt.id
            if seen == "infra":
                outcomes.finish_attempt(s, job, attempt, exit_code=None, known_class=st.FAILURE_CLASS_INFRA)
            else:
                outcomes.finish_attempt(
                    s,
                    job,
                    attempt,
                    exit_code={"exit0": 0, "exit1": 1, "stopped": 143}[seen],
                    stopped_by_backend=seen == "stopped",
                )
            return ""

        self.seen_running.add(self.db.run_sync(go))

    # -- users --------------------------------------------------------------------------------------

    @rule(pick=PICK)
    def stop(self, pick: int) -> None:
        job_id = self._pick(pick, sm.QUEUED, sm.PAUSED, sm.SUBMITTED, sm.PENDING, sm.RUNNING)
        if job_id is None:
            return

        def go(s: Session) -> None:
            job, _ = _current(s, job_id)
            if job.state in (sm.QUEUED, sm.PAUSED):
                jobs.transition(s, job, sm.STOPPED, "stopped by alice")
                pipeline.on_end(s, job)
            elif job.state in sm.ACTIVE:
                jobs.request(s, job, sm.STOP)

        self.db.run_sync(go)

    @rule(pick=PICK)
    def pause(self, pick: int) -> None:
        job_id = self._pick(pick, sm.SUBMITTED, sm.PENDING, sm.RUNNING)
        if job_id is None:
            return

        def go(s: Session) -> None:
            job, _ = _current(s, job_id)
            if job.state not in sm.ACTIVE:
                return
            if job.desired == sm.STOP:
                with pytest.raises(errors.FailedPrecondition):
                    jobs.request(s, job, sm.PAUSE)
            else:
                jobs.request(s, job, sm.PAUSE)

        self.db.run_sync(go)

    @rule(pick=PICK)
    def resume(self, pick: int) -> None:
        job_id = self._pick(pick, sm.PAUSED, sm.STOPPED)
        if job_id is None:
            return

        def go(s: Session) -> None:
            job, _ = _current(s, job_id)
            if job.state in (sm.PAUSED, sm.STOPPED):
                jobs.transition(s, job, sm.QUEUED, "resumed by alice")

        self.db.run_sync(go)

    @rule(pick=PICK)
    def retry(self, pick: int) -> None:
        job_id = self._pick(pick, sm.FAILED)
        if job_id is None:
            return

        def go(s: Session) -> None:
            job, _ = _current(s, job_id)
            if job.state == sm.FAILED:
                job.not_before = 0.0
                jobs.transition(s, job, sm.QUEUED, "retried by alice")

        self.db.run_sync(go)

    # -- the platform -------------------------------------------------------------------------------

    @rule(fleet=hs.sampled_from(FLEETS))
    def drain(self, fleet: str) -> None:
        self.db.run_sync(lambda s: platform.request_stops(s, {fleet: (st.WAIT_REASON_DRAIN, f"fleet {fleet} drains")}))

    @rule(fleet=hs.sampled_from(FLEETS))
    def window_closes(self, fleet: str) -> None:
        self.db.run_sync(lambda s: platform.request_stops(s, {fleet: (st.WAIT_REASON_WINDOW, f"fleet {fleet} closed")}))

    @rule(closed=hs.sampled_from([(), ("east",), ("west",)]))
    def requeue(self, closed: tuple[str, ...]) -> None:
        self.db.run_sync(lambda s: platform.requeue(s, {f: (st.WAIT_REASON_WINDOW, "closed") for f in closed}))

    # -- crashes ------------------------------------------------------------------------------------

    @rule(pick=PICK, fleet=hs.sampled_from(FLEETS))
    def crash_mid_dispatch(self, pick: int, fleet: str) -> None:
        """The control plane dies after claiming, before committing: nothing of it remains."""
        job_id = self._pick(pick, sm.QUEUED)
        if job_id is None:
            return
        before = self.db.run_sync(lambda s: (jobs.get_job(s, job_id).state, jobs.get_job(s, job_id).event_seq))

        def go(s: Session) -> None:
            job, _ = _current(s, job_id)
            if job.state == sm.QUEUED:
                jobs.new_attempt(s, job, fleet, "dispatched", now=time.time())
            raise Crash

        with pytest.raises(Crash):
            self.db.run_sync(go)
        after = self.db.run_sync(lambda s: (jobs.get_job(s, job_id).state, jobs.get_job(s, job_id).event_seq))
        assert after == before

    @rule(pick=PICK)
    def node_lost(self, pick: int) -> None:
        """The node of the job's attempt stops heartbeating (a crash of the machine)."""
        job_id = self._pick(pick, sm.SUBMITTED, sm.PENDING, sm.RUNNING)
        if job_id is None:
            return

        def go(s: Session) -> None:
            _, attempt = _current(s, job_id)
            if attempt is None or attempt.state not in sm.ACTIVE:
                return
            name = f"node-{attempt.id}"
            attempt.node = name
            s.merge(
                m.Node(
                    name=name,
                    fleet=attempt.fleet,
                    address="",
                    info=b"",
                    state=node_pb2.NODE_STATE_READY,
                    last_heartbeat=0.0,
                )
            )
            s.flush()
            nodes.mark_lost(s, timeout=1.0)

        self.db.run_sync(go)

    # -- what must always hold ----------------------------------------------------------------------

    @invariant()
    def histories_are_legal_paths(self) -> None:
        if not getattr(self, "mine", None):
            return
        self.db.run_sync(self._check_all)

    def _check_all(self, s: Session) -> None:
        ids = list(self.mine)
        events: dict[str, list[m.JobEvent]] = {j: [] for j in ids}
        for e in s.scalars(select(m.JobEvent).where(m.JobEvent.job_id.in_(ids)).order_by(m.JobEvent.seq)):
            events[e.job_id].append(e)
        attempts: dict[str, list[m.Attempt]] = {j: [] for j in ids}
        for a in s.scalars(select(m.Attempt).where(m.Attempt.job_id.in_(ids))):
            attempts[a.job_id].append(a)
        for job in s.scalars(select(m.Job).where(m.Job.id.in_(ids))):
            _check_history(job, events[job.id], attempts[job.id], self)


def _check_history(job: m.Job, events: list[m.JobEvent], attempts: list[m.Attempt], model: LedgerModel) -> None:
    job_id = job.id
    assert [e.seq for e in events] == list(range(1, job.event_seq + 1)), "event sequence has gaps"
    assert (events[0].from_state, events[0].to_state) == (st.JOB_STATE_UNSPECIFIED, sm.QUEUED)
    state: int = sm.QUEUED
    per_attempt: dict[str, list[int]] = {}
    for e in events[1:]:
        if e.attempt_only:
            path = per_attempt.setdefault(e.attempt_id, [])
            assert not path or path[-1] == e.from_state
            sm.check(e.from_state, e.to_state, f"attempt {e.attempt_id}")
            path.append(e.to_state)
            continue
        assert e.from_state == state, f"{job_id}: event {e.seq} starts at {sm.name(e.from_state)}, not {sm.name(state)}"
        sm.check(e.from_state, e.to_state, f"job {job_id}")
        state = e.to_state
        if e.attempt_id:
            per_attempt.setdefault(e.attempt_id, [sm.QUEUED]).append(e.to_state)
    assert state == job.state, f"{job_id}: events end at {sm.name(state)}, the job is {sm.name(job.state)}"
    ran = any(e.to_state == sm.RUNNING and not e.attempt_only for e in events)
    assert (job.started_at is not None) == ran, f"{job_id}: started_at {job.started_at} but ran={ran}"
    for attempt in attempts:
        path = per_attempt.get(attempt.id, [])
        assert path and path[-1] == attempt.state, f"{attempt.id}: {path} but {sm.name(attempt.state)}"
        assert (attempt.started_at is not None) == (sm.RUNNING in path), attempt.id
        # never an invented state: PENDING only after an accepted launch, RUNNING only when seen
        # running or implied by success
        assert sm.PENDING not in path or attempt.id in model.launched, f"{attempt.id}: {path}"
        assert sm.RUNNING not in path or attempt.id in model.seen_running or path[-1] == sm.SUCCEEDED, (
            f"{attempt.id}: {[sm.name(x) for x in path]}"
        )
    if job.state not in sm.ACTIVE:
        assert job.desired == sm.NO_REQUEST, f"{job_id} rests with a request pending"


def test_ledger_histories_are_legal_paths(db: Database) -> None:
    LedgerModel.db = db
    run_state_machine_as_test(
        LedgerModel,
        settings=settings(
            max_examples=25,
            stateful_step_count=30,
            deadline=None,
            # no shrinking: a failure is reported with its whole sequence, in bounded time
            phases=[Phase.explicit, Phase.reuse, Phase.generate],
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
