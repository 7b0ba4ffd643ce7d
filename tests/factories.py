"""Object factories for ledger and control-plane tests (one module, dstack style)."""

from __future__ import annotations

import json
import time

from sqlalchemy.orm import Session
from starforge_api.ingest.v1 import ingest_service_pb2 as ing
from starforge_api.job.v1 import job_pb2, job_spec_pb2, lifecycle_event_pb2, telemetry_pb2

from common import ids
from control import auth
from control.db import models as m
from control.ledger import convert, jobs
from control.ledger import state_machine as sm


def user(s: Session, name: str = "alice", *, admin: bool = False) -> tuple[m.User, str]:
    u = auth.create_user(s, name, admin=admin)
    token, _ = auth.issue_token(s, name, "pat", name="test")
    return u, token


def spec(**kw: object) -> job_spec_pb2.JobSpec:
    base = job_spec_pb2.JobSpec(
        api_version="forge/v2",
        project="@alice/lab",
        experiment="exp",
        method="custom/custom",
        config_json="{}",
    )
    for k, v in kw.items():
        setattr(base, k, v)
    return base


def job(
    s: Session,
    *,
    owner: str = "alice",
    state: int = sm.QUEUED,
    priority: int = 0,
    series: str = "cpu",
    gpus: int = 0,
    fleets: tuple[str, ...] = ("local",),
    retry_budget: int = 0,
) -> m.Job:
    now = time.time()
    pools = [job_spec_pb2.Pool(name="main", series=series, nodes=1, gpus_per_node=gpus)]
    row = m.Job(
        id=ids.new_job_id(),
        owner=owner,
        project=f"@{owner}/lab",
        experiment="exp",
        method="custom/custom",
        state=state,
        queue="default",
        priority=priority,
        series=series,
        gpus=gpus,
        needs=json.dumps({"gpus": {series: gpus or 1}, "nodes": {series: 1}}),
        eligible_fleets=json.dumps(list(fleets)),
        spec=spec(project=f"@{owner}/lab").SerializeToString(),
        pools=convert.pools_to_bytes(pools),
        retry_budget=retry_budget,
        created_at=now,
        updated_at=now,
        seq=jobs.next_counter(s, "job_seq"),
        next_cause=job_pb2.ATTEMPT_CAUSE_INITIAL,
    )
    s.add(row)
    s.flush()
    return row


def attempt(s: Session, j: m.Job, *, fleet: str = "local", to: int = sm.SUBMITTED) -> m.Attempt:
    """Create the job's next attempt and walk job and attempt to `to` (from QUEUED)."""
    number = j.attempts_count + 1
    a = m.Attempt(
        id=ids.attempt_id(j.id, number),
        job_id=j.id,
        number=number,
        state=sm.QUEUED,
        fleet=fleet,
        needs=json.dumps({j.series: j.gpus or 1}),
        created_at=time.time(),
    )
    s.add(a)
    j.attempts_count = number
    jobs.transition(s, j, sm.SUBMITTED, "test dispatch", attempt=a)
    if to != sm.SUBMITTED:
        jobs.advance(s, j, a, to, "test")
    s.flush()
    return a


def record(seq: int, **body: object) -> ing.Record:
    r = ing.Record(seq=seq)
    r.time.GetCurrentTime()
    for k, v in body.items():
        getattr(r, k).CopyFrom(v)
    return r


def log_record(seq: int, *lines: str, stream: int = telemetry_pb2.LOG_STREAM_STDOUT) -> ing.Record:
    return record(seq, log_chunk=ing.LogChunk(stream=stream, lines=list(lines)))  # type: ignore[arg-type]


def metric_record(seq: int, step: int, **values: float) -> ing.Record:
    return record(
        seq,
        metrics=ing.MetricBatch(
            points=[telemetry_pb2.MetricPoint(step=step, name=k, value=v) for k, v in values.items()]
        ),
    )


def lifecycle_record(seq: int, phase: int, **kw: object) -> ing.Record:
    return record(seq, lifecycle=lifecycle_event_pb2.LifecycleEvent(phase=phase, **kw))  # type: ignore[arg-type]
