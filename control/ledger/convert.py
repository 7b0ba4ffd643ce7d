"""Ledger rows -> protos (Job, Attempt, JobEvent). Pure functions."""

from __future__ import annotations

import json

from google.protobuf import timestamp_pb2
from starforge_api.job.v1 import job_pb2, job_spec_pb2
from starforge_api.job.v1 import job_state_pb2 as st

from control.db import models as m


def ts(value: float | None) -> timestamp_pb2.Timestamp | None:
    if value is None:
        return None
    t = timestamp_pb2.Timestamp()
    t.FromNanoseconds(int(value * 1e9))
    return t


def pools_from_bytes(data: bytes) -> list[job_spec_pb2.Pool]:
    """Pools are stored as a Job message holding only `pools` (no separate wrapper message needed)."""
    wrapper = job_pb2.Job()
    wrapper.ParseFromString(data)
    return list(wrapper.pools)


def pools_to_bytes(pools: list[job_spec_pb2.Pool]) -> bytes:
    return job_pb2.Job(pools=pools).SerializeToString()


def attempt_to_proto(a: m.Attempt) -> job_pb2.Attempt:
    msg = job_pb2.Attempt(
        attempt_id=a.id,
        number=a.number,
        state=a.state,  # type: ignore[arg-type]
        cause=a.cause,  # type: ignore[arg-type]
        fleet=a.fleet,
        executor_kind=a.executor_kind,
        backend_handle=a.backend_handle,
        node=a.node,
        failure_class=a.failure_class,  # type: ignore[arg-type]
        reason=a.reason,
        capsule_digest=a.capsule_digest,
    )
    for field, value in (
        ("create_time", a.created_at),
        ("start_time", a.started_at),
        ("end_time", a.ended_at),
    ):
        t = ts(value)
        if t is not None:
            getattr(msg, field).CopyFrom(t)
    if a.exit_code is not None:
        msg.exit_code = a.exit_code
    return msg


def job_to_proto(
    j: m.Job,
    attempts: list[m.Attempt] | None = None,
    *,
    queue_position: int = 0,
    trim_spec: bool = False,
) -> job_pb2.Job:
    spec = job_spec_pb2.JobSpec()
    spec.ParseFromString(j.spec)
    if trim_spec:
        spec.ClearField("workspace")
        spec.provenance.ClearField("config_snapshot")
    provenance = job_spec_pb2.Provenance()
    if j.provenance:
        provenance.ParseFromString(j.provenance)
    msg = job_pb2.Job(
        job_id=j.id,
        owner=j.owner,
        project=j.project,
        experiment=j.experiment,
        method=j.method,
        state=j.state,  # type: ignore[arg-type]
        spec=spec,
        pools=pools_from_bytes(j.pools),
        image=j.image,
        image_source=j.image_source,  # type: ignore[arg-type]
        image_source_detail=j.image_source_detail,
        framework_version=j.framework_version,
        runtime_id=j.runtime_id,
        warnings=json.loads(j.warnings or "[]"),
        provenance=provenance,
        resolved_config_json=j.resolved_config,
        fleet=j.fleet,
        parent_job_id=j.parent_job_id,
        stage=j.stage,
        retries_used=j.retries_used,
        retry_budget=j.retry_budget,
        out_dir=j.out_dir,
        labels=json.loads(j.labels or "{}"),
        attempts=[attempt_to_proto(a) for a in (attempts or [])],
    )
    if j.state == st.JOB_STATE_QUEUED:
        msg.wait.CopyFrom(
            job_pb2.WaitInfo(
                reason=j.wait_reason,  # type: ignore[arg-type]
                message=j.wait_message,
                queue_position=queue_position,
                queue=j.queue,
            )
        )
    if j.diagnosis:
        msg.diagnosis.ParseFromString(j.diagnosis)
    for field, value in (
        ("create_time", j.created_at),
        ("update_time", j.updated_at),
        ("start_time", j.started_at),
        ("end_time", j.ended_at),
    ):
        t = ts(value)
        if t is not None:
            getattr(msg, field).CopyFrom(t)
    return msg


def event_to_proto(e: m.JobEvent) -> job_pb2.JobEvent:
    msg = job_pb2.JobEvent(
        job_id=e.job_id,
        attempt_id=e.attempt_id,
        from_state=e.from_state,  # type: ignore[arg-type]
        to_state=e.to_state,  # type: ignore[arg-type]
        reason=e.reason,
        sequence=e.seq,
        attempt_only=e.attempt_only,
    )
    t = ts(e.at)
    if t is not None:
        msg.time.CopyFrom(t)
    return msg
