"""Secrets at dispatch and re-send (SQLite and PostgreSQL): the executor gets the values, the stored
LaunchRequest never holds them, a re-sent launch resolves them again, a deleted one fails the attempt.

The real claim transaction (`Scheduler._place`) and the reconciler's re-send resolution run
against a real database; no executor is involved (what `_place` returns is what dispatch sends).
"""

from __future__ import annotations

import dataclasses
import pathlib

from sqlalchemy.orm import Session
from starforge_api.executor.v1 import launch_request_pb2 as lr
from starforge_api.job.v1 import job_spec_pb2
from starforge_api.job.v1 import job_state_pb2 as st

from control import auth, secrets
from control.db.engine import Database
from control.ledger import jobs
from control.ledger import state_machine as sm
from control.scheduler.dispatch import Scheduler
from control.scheduler.reconcile import Reconciler
from tests import factories as f
from tests.integration.ledger.test_scheduler import _ctx

KEYRING = secrets.Keyring(secrets.SecretKey(b"\x07" * 32))
ALICE = auth.Principal(user="alice", admin=False, kind="pat", token_id="t")


def _scheduler(db: Database, tmp: pathlib.Path) -> Scheduler:
    return Scheduler(dataclasses.replace(_ctx(db, tmp), keyring=KEYRING))


def _job_naming(db: Database, *refs: job_spec_pb2.SecretRef) -> str:
    def make(s: Session) -> str:
        f.user(s, "alice")
        j = f.job(s, owner="alice", series="h200", gpus=8, fleets=("gpu",))
        spec = f.spec(project="@alice/lab")
        spec.secrets.extend(refs)
        j.spec = spec.SerializeToString()
        return j.id

    return db.run_sync(make)


def _set(db: Database, name: str, value: str, project: str = "") -> None:
    db.run_sync(lambda s: secrets.set_secret(s, ALICE, KEYRING, name, value, project))


def test_values_reach_the_launch_but_never_the_stored_request(db: Database, tmp_path: pathlib.Path) -> None:
    sched = _scheduler(db, tmp_path)
    job_id = _job_naming(
        db, job_spec_pb2.SecretRef(name="WANDB", env="MY_WANDB"), job_spec_pb2.SecretRef(name="HF", env="HF_TOKEN")
    )
    _set(db, "WANDB", "user-wandb-value")
    _set(db, "HF", "user-hf-value")
    _set(db, "HF", "project-hf-value", project="@alice/lab")  # the project's wins
    [claimed] = db.run_sync(sched._place)
    sent = lr.LaunchRequest.FromString(claimed.launch)
    assert dict(sent.secret_env) == {"MY_WANDB": "user-wandb-value", "HF_TOKEN": "project-hf-value"}
    assert sent.env["FORGE_SECRET_ENV"] == "HF_TOKEN,MY_WANDB"

    attempt = db.run_sync(lambda s: jobs.get_attempt(s, claimed.attempt_id))
    stored = lr.LaunchRequest.FromString(attempt.launch)
    assert dict(stored.secret_env) == {}
    assert b"value" not in attempt.launch

    # a re-send resolves the values again (a changed value is the new one) from the stored request
    _set(db, "WANDB", "rotated-wandb-value")
    reconciler = Reconciler(sched.ctx, sched)
    resent = db.run_sync(lambda s: reconciler._launch_with_secrets(s, jobs.get_attempt(s, claimed.attempt_id)))
    assert resent is not None
    assert dict(lr.LaunchRequest.FromString(resent).secret_env) == {
        "MY_WANDB": "rotated-wandb-value",
        "HF_TOKEN": "project-hf-value",
    }
    assert db.run_sync(lambda s: jobs.get_job(s, job_id)).state == sm.SUBMITTED


def test_a_secret_deleted_before_dispatch_fails_the_attempt_as_a_precheck(db: Database, tmp_path: pathlib.Path) -> None:
    sched = _scheduler(db, tmp_path)
    job_id = _job_naming(db, job_spec_pb2.SecretRef(name="WANDB"))
    _set(db, "WANDB", "user-wandb-value")
    db.run_sync(lambda s: secrets.delete_secret(s, ALICE, KEYRING, "WANDB", ""))
    assert db.run_sync(sched._place) == []
    job = db.run_sync(lambda s: jobs.get_job(s, job_id))
    [attempt] = db.run_sync(lambda s: jobs.attempts_of(s, job_id))
    assert attempt.failure_class == st.FAILURE_CLASS_PRECHECK
    assert "secret WANDB was deleted after the job was submitted" in attempt.reason
    assert job.state == sm.FAILED
