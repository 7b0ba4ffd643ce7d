"""Ledger behaviour on SQLite and PostgreSQL: migrations, transitions, ingest idempotency, outcomes."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import select
from sqlalchemy.orm import Session
from starforge_api.control.v1 import error_reason_pb2
from starforge_api.executor.v1 import launch_request_pb2 as lr
from starforge_api.job.v1 import job_pb2, lifecycle_event_pb2
from starforge_api.job.v1 import job_state_pb2 as st

from common import errors
from control import launch_secrets
from control.db import models as m
from control.db.engine import Database
from control.ledger import jobs, outcomes
from control.ledger import state_machine as sm
from control.telemetry import ingest, logs, metrics
from tests import factories as f


def test_migrations_match_models(db: Database) -> None:
    with db.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), m.Base.metadata)
    assert diff == []


def test_transitions_are_recorded_as_events(db: Database) -> None:
    def go(s):  # type: ignore[no-untyped-def]
        j = f.job(s)
        a = f.attempt(s, j, to=sm.RUNNING)
        jobs.transition(s, j, sm.SUCCEEDED, "done", attempt=a)
        return j.id

    job_id = db.run_sync(go)
    events = db.run_sync(
        lambda s: [
            (e.from_state, e.to_state)
            for e in s.scalars(select(m.JobEvent).where(m.JobEvent.job_id == job_id).order_by(m.JobEvent.seq))
        ]
    )
    assert events == [
        (sm.QUEUED, sm.SUBMITTED),
        (sm.SUBMITTED, sm.PENDING),
        (sm.PENDING, sm.RUNNING),
        (sm.RUNNING, sm.SUCCEEDED),
    ]


def test_illegal_transition_is_an_error_not_a_noop(db: Database) -> None:
    def go(s):  # type: ignore[no-untyped-def]
        j = f.job(s)
        a = f.attempt(s, j, to=sm.RUNNING)
        jobs.transition(s, j, sm.SUCCEEDED, "done", attempt=a)
        with pytest.raises(errors.FailedPrecondition, match="SUCCEEDED and cannot become QUEUED"):
            jobs.transition(s, j, sm.QUEUED, "again")
        return j.state

    assert db.run_sync(go) == sm.SUCCEEDED


def test_ingest_is_idempotent_by_sequence(db: Database) -> None:
    def setup(s):  # type: ignore[no-untyped-def]
        j = f.job(s)
        return f.attempt(s, j, to=sm.PENDING).id

    aid = db.run_sync(setup)
    batch = [
        f.log_record(1, "hello", "world"),
        f.metric_record(2, 1, loss=0.9),
        f.log_record(3, "third"),
    ]
    first = db.run_sync(lambda s: ingest.apply_records(s, aid, batch, scope_attempt_id=None))
    again = db.run_sync(lambda s: ingest.apply_records(s, aid, batch, scope_attempt_id=None))
    assert (first.acked_seq, first.logs_added, first.metrics_added) == (3, 3, 1)
    assert (again.acked_seq, again.logs_added, again.metrics_added) == (3, 0, 0)
    job_id = aid.split(".")[0]
    texts = db.run_sync(lambda s: [r.text for r in logs.after(s, job_id, None)])
    assert texts == ["hello", "world", "third"]
    series = db.run_sync(lambda s: metrics.series(s, job_id))
    assert [(p.step, p.value) for p in series[0].points] == [(1, 0.9)]


def test_lines_before_a_cursor_page_back_across_attempts(db: Database) -> None:
    def setup(s: Session) -> str:
        j = f.job(s)
        logs.append(s, j.id, 1, 0, [(1, 0.0, f"a1-{i}") for i in range(10)])
        logs.append(s, j.id, 2, 0, [(1, 0.0, f"a2-{i}") for i in range(5)])
        return j.id

    jid = db.run_sync(setup)

    def before(cursor: tuple[int, int], n: int, attempt: int = 0) -> list[str]:
        return db.run_sync(lambda s: [r.text for r in logs.before(s, jid, cursor, n, attempt)])

    assert before((2, 2), 4) == ["a1-8", "a1-9", "a2-0", "a2-1"]  # the page crosses into attempt 1
    assert before((1, 3), 10) == ["a1-0", "a1-1", "a1-2"]  # short: the history starts there
    assert before((1, 0), 10) == []
    assert before((2, 2), 4, attempt=2) == ["a2-0", "a2-1"]  # one attempt only
    assert before((3, 0), 2) == ["a2-3", "a2-4"]  # a cursor past the end: the tail


def test_ingest_refuses_gaps(db: Database) -> None:
    aid = db.run_sync(lambda s: f.attempt(s, f.job(s), to=sm.PENDING).id)
    with pytest.raises(errors.InvalidArgument, match="expected seq 1, got 2"):
        db.run_sync(lambda s: ingest.apply_records(s, aid, [f.log_record(2, "x")], scope_attempt_id=None))


def test_ingest_token_scope(db: Database) -> None:
    aid = db.run_sync(lambda s: f.attempt(s, f.job(s), to=sm.PENDING).id)
    with pytest.raises(errors.PermissionDenied, match="another attempt"):
        db.run_sync(lambda s: ingest.apply_records(s, aid, [f.log_record(1, "x")], scope_attempt_id="jother.1"))


def test_every_send_gets_a_fresh_attempt_token_and_the_ledger_keeps_none(db: Database) -> None:
    def go(s):  # type: ignore[no-untyped-def]
        a = f.attempt(s, f.job(s), to=sm.SUBMITTED)
        full = lr.LaunchRequest(
            attempt_id=a.id,
            ingest=lr.IngestTarget(address="console:1", token="sfr_aaaaaaaaaa_old"),
            blob_source=lr.BlobSource(address="console:1", token="sfr_aaaaaaaaaa_old"),
            secret_env={"HF_TOKEN": "hf_secret"},
        )
        a.launch = launch_secrets.stored_form(full)
        first, second = launch_secrets.resolve_launch(s, a), launch_secrets.resolve_launch(s, a)
        scopes = [t.attempt_id for t in s.scalars(select(m.Token).where(m.Token.kind == "run"))]
        return a.id, a.launch, first, second, scopes

    aid, stored, first, second, scopes = db.run_sync(go)
    kept = lr.LaunchRequest.FromString(stored)
    assert (kept.ingest.token, kept.blob_source.token, dict(kept.secret_env)) == ("", "", {})
    assert kept.ingest.address == "console:1"
    assert first.ingest.token.startswith("sfr_") and first.blob_source.token == first.ingest.token
    assert second.ingest.token != first.ingest.token
    assert scopes == [aid, aid]


def test_an_ended_attempt_takes_logs_but_no_lifecycle(db: Database) -> None:
    aid = db.run_sync(lambda s: f.attempt(s, f.job(s), to=sm.RUNNING).id)

    def finish(s):  # type: ignore[no-untyped-def]
        a = jobs.get_attempt(s, aid)
        outcomes.finish_attempt(s, jobs.get_job(s, a.job_id), a, exit_code=3)

    db.run_sync(finish)
    applied = db.run_sync(lambda s: ingest.apply_records(s, aid, [f.log_record(1, "late")], scope_attempt_id=aid))
    assert applied.acked_seq == 1
    exited = f.lifecycle_record(2, lifecycle_event_pb2.LIFECYCLE_PHASE_COMMAND_EXITED, exit_code=0)
    with pytest.raises(errors.PermissionDenied, match="has ended") as refused:
        db.run_sync(lambda s: ingest.apply_records(s, aid, [exited], scope_attempt_id=aid))
    assert refused.value.reason == error_reason_pb2.ERROR_REASON_ATTEMPT_ENDED
    assert db.run_sync(lambda s: jobs.get_job(s, aid.split(".")[0]).state) == sm.FAILED


@pytest.mark.parametrize(
    ("code", "lines", "state", "cls"),
    [
        (0, ["ok"], sm.SUCCEEDED, st.FAILURE_CLASS_UNSPECIFIED),
        (3, ["Traceback", "ValueError: bad"], sm.FAILED, st.FAILURE_CLASS_USER_CODE),
        (
            1,
            ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB"],
            sm.FAILED,
            st.FAILURE_CLASS_OUT_OF_MEMORY,
        ),
        (
            1,
            ["FileNotFoundError: [Errno 2] No such file or directory: 'data/train.parquet'"],
            sm.FAILED,
            st.FAILURE_CLASS_DATA,
        ),
    ],
)
def test_command_exit_ends_the_attempt_with_a_diagnosis(
    db: Database, code: int, lines: list[str], state: int, cls: int
) -> None:
    aid = db.run_sync(lambda s: f.attempt(s, f.job(s), to=sm.PENDING).id)
    recs = [
        f.lifecycle_record(1, lifecycle_event_pb2.LIFECYCLE_PHASE_COMMAND_STARTED),
        f.log_record(2, *lines),
        f.lifecycle_record(3, lifecycle_event_pb2.LIFECYCLE_PHASE_COMMAND_EXITED, exit_code=code),
    ]
    applied = db.run_sync(lambda s: ingest.apply_records(s, aid, recs, scope_attempt_id=None))
    assert [t.to_state for t in applied.transitions] == [sm.RUNNING, state]

    def read(s):  # type: ignore[no-untyped-def]
        j = jobs.get_job(s, aid.split(".")[0])
        a = jobs.get_attempt(s, aid)
        return j.state, a.state, a.exit_code, outcomes.diagnosis_of(j)

    jstate, astate, exit_code, diag = db.run_sync(read)
    assert (jstate, astate, exit_code) == (state, state, code)
    if state == sm.FAILED:
        assert diag is not None and diag.failure_class == cls
        assert diag.summary
        assert diag.hint
        assert lines[-1] in list(diag.log_tail)
        if cls == st.FAILURE_CLASS_USER_CODE:
            assert diag.summary == f"train.sh exited with code {code}"
    else:
        assert diag is None


def test_finish_is_once_whoever_notices_first(db: Database) -> None:
    aid = db.run_sync(lambda s: f.attempt(s, f.job(s), to=sm.RUNNING).id)

    def finish(code: int) -> Callable[[Session], list[jobs.Transition]]:
        def go(s: Session) -> list[jobs.Transition]:
            a = jobs.get_attempt(s, aid)
            return outcomes.finish_attempt(s, jobs.get_job(s, a.job_id), a, exit_code=code)

        return go

    assert len(db.run_sync(finish(0))) == 1
    assert db.run_sync(finish(1)) == []
    assert db.run_sync(lambda s: jobs.get_job(s, aid.split(".")[0]).state) == sm.SUCCEEDED


def test_retryable_failure_requeues_within_budget_only(db: Database) -> None:
    def go(s):  # type: ignore[no-untyped-def]
        j = f.job(s, retry_budget=1)
        a = f.attempt(s, j, to=sm.RUNNING)
        outcomes.finish_attempt(s, j, a, exit_code=None, known_class=st.FAILURE_CLASS_NODE_LOST, message="node n1 lost")
        first = (j.state, j.retries_used, j.wait_reason)
        a2 = f.attempt(s, j, to=sm.RUNNING)
        outcomes.finish_attempt(s, j, a2, exit_code=None, known_class=st.FAILURE_CLASS_NODE_LOST, message="lost again")
        return first, (j.state, j.retries_used), a2.cause

    first, second, _ = db.run_sync(go)
    assert first == (sm.QUEUED, 1, st.WAIT_REASON_RETRY_BACKOFF)
    assert second == (sm.FAILED, 1)


def test_user_code_failures_are_never_auto_retried(db: Database) -> None:
    def go(s):  # type: ignore[no-untyped-def]
        j = f.job(s, retry_budget=5)
        a = f.attempt(s, j, to=sm.RUNNING)
        outcomes.finish_attempt(s, j, a, exit_code=3)
        return j.state, j.retries_used

    assert db.run_sync(go) == (sm.FAILED, 0)


def test_stop_requested_ends_stopped_not_failed(db: Database) -> None:
    def go(s):  # type: ignore[no-untyped-def]
        j = f.job(s)
        a = f.attempt(s, j, to=sm.RUNNING)
        jobs.request(s, j, sm.STOP)
        outcomes.finish_attempt(s, j, a, exit_code=143, signal=15)
        return j.state, a.state, j.desired

    assert db.run_sync(go) == (sm.STOPPED, sm.STOPPED, sm.NO_REQUEST)


def test_attempt_cause_values_exist() -> None:
    assert job_pb2.ATTEMPT_CAUSE_AUTO_RETRY != 0


def _events(s: Session, job_id: str) -> list[tuple[int, int, bool]]:
    return [
        (e.from_state, e.to_state, e.attempt_only)
        for e in s.scalars(select(m.JobEvent).where(m.JobEvent.job_id == job_id).order_by(m.JobEvent.seq))
    ]


def test_paused_while_its_launch_is_refused_never_ran(db: Database) -> None:
    def go(s):  # type: ignore[no-untyped-def]
        j = f.job(s)
        a = f.attempt(s, j, to=sm.SUBMITTED)
        jobs.request(s, j, sm.PAUSE)
        outcomes.finish_attempt(s, j, a, exit_code=None, known_class=st.FAILURE_CLASS_PRECHECK, message="refused")
        return j.state, j.started_at, a.started_at, _events(s, j.id)[-1]

    assert db.run_sync(go) == (sm.PAUSED, None, None, (sm.SUBMITTED, sm.PAUSED, False))


def test_a_stale_attempt_ending_is_an_event_of_its_own(db: Database) -> None:
    def go(s):  # type: ignore[no-untyped-def]
        j = f.job(s)
        a = f.attempt(s, j, to=sm.RUNNING)
        jobs.transition(s, j, sm.PAUSED, "paused without its attempt")  # the job moved on
        jobs.transition(s, j, sm.QUEUED, "resumed")
        jobs.advance(s, j, a, sm.STOPPED, "observed STOPPED")
        return j.state, a.state, _events(s, j.id)[-1]

    assert db.run_sync(go) == (sm.QUEUED, sm.STOPPED, (sm.RUNNING, sm.STOPPED, True))


def test_a_stop_overrides_a_pause_never_the_reverse(db: Database) -> None:
    def go(s):  # type: ignore[no-untyped-def]
        j = f.job(s)
        f.attempt(s, j, to=sm.RUNNING)
        assert jobs.request(s, j, sm.PAUSE)
        assert not jobs.request(s, j, sm.PAUSE)  # asked already: a no-op
        assert jobs.request(s, j, sm.STOP)
        with pytest.raises(errors.FailedPrecondition, match="being asked to stop"):
            jobs.request(s, j, sm.PAUSE)
        return j.desired

    assert db.run_sync(go) == sm.STOP
