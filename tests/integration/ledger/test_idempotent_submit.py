"""Idempotent submission over the real gRPC API, on SQLite and PostgreSQL: racing retries of one
SubmitJob (same request id) queue one job, and every retry gets that job back."""

from __future__ import annotations

import asyncio
import pathlib

import grpc
import pytest
from sqlalchemy import func, select
from starforge_api.control.v1 import control_service_pb2 as ctl

from control.db import models as m
from control.db.engine import Database
from tests.integration.console import console

RETRIES = 32


def _count_jobs(db_url: str, request_id: str) -> tuple[int, int]:
    db = Database(db_url)
    try:
        return db.run_sync(
            lambda s: (
                int(s.scalar(select(func.count()).select_from(m.Job).where(m.Job.request_id == request_id)) or 0),
                int(s.scalar(select(func.count()).select_from(m.Job)) or 0),
            )
        )
    finally:
        db.close()


async def test_concurrent_retries_of_one_submission_queue_one_job(tmp_path: pathlib.Path, db_url: str) -> None:
    async with console(tmp_path, database_url=db_url) as c:
        spec = await c.custom_spec("true\n")
        request = ctl.SubmitJobRequest(spec=spec, request_id="retry-me-0001")
        answers = await asyncio.gather(*(c.jobs.SubmitJob(request, metadata=c.md) for _ in range(RETRIES)))
        ids = {a.job.job_id for a in answers}
        assert len(ids) == 1, ids
        (job_id,) = ids
        # a later retry, after the race, still gets the same job
        again = await c.jobs.SubmitJob(request, metadata=c.md)
        assert again.job.job_id == job_id
        # a different request id is a different job
        other = await c.jobs.SubmitJob(ctl.SubmitJobRequest(spec=spec, request_id="another-0002"), metadata=c.md)
        assert other.job.job_id != job_id
    assert _count_jobs(db_url, "retry-me-0001") == (1, 2)


async def test_a_request_id_the_ledger_cannot_hold_is_refused_before_anything_is_queued(
    tmp_path: pathlib.Path, db_url: str
) -> None:
    """PostgreSQL refused an over-long request id or a NUL byte only when the batch was written
    (INTERNAL, a traceback in the log), SQLite stored them; both refuse them up front now, and a
    request id of the column's full length still works, retries included."""
    async with console(tmp_path, database_url=db_url) as c:
        spec = await c.custom_spec("true\n")
        for bad in ("r" * 65, "retry\x00me", "tab\there"):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await c.jobs.SubmitJob(ctl.SubmitJobRequest(spec=spec, request_id=bad), metadata=c.md)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "request_id must be at most 64 characters" in (refused.value.details() or "")
        longest = "r" * 64
        first = await c.jobs.SubmitJob(ctl.SubmitJobRequest(spec=spec, request_id=longest), metadata=c.md)
        again = await c.jobs.SubmitJob(ctl.SubmitJobRequest(spec=spec, request_id=longest), metadata=c.md)
        assert again.job.job_id == first.job.job_id
    assert _count_jobs(db_url, longest) == (1, 1)
