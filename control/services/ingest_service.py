"""IngestService servicer: batches from the capsule -> telemetry.ingest -> acks (and stop signals)."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from typing import Any

from starforge.control.v1 import error_reason_pb2
from starforge.ingest.v1 import ingest_service_pb2 as pb
from starforge.ingest.v1 import ingest_service_pb2_grpc as pb_grpc

from common import errors
from control import auth
from control.context import Context
from control.ledger import jobs
from control.telemetry import ingest

MAX_RECORDS_PER_BATCH = 5000


class IngestServicer(pb_grpc.IngestServiceServicer):
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def Report(
        self, request_iterator: AsyncIterator[pb.ReportRequest], context: Any
    ) -> AsyncIterator[pb.ReportResponse]:
        principal = auth.current()
        attempt_id = ""
        async for batch in request_iterator:
            if not batch.attempt_id:
                raise errors.InvalidArgument("attempt_id is required on every ReportRequest")
            if attempt_id and batch.attempt_id != attempt_id:
                raise errors.InvalidArgument("one Report stream carries one attempt")
            attempt_id = batch.attempt_id
            if len(batch.records) > MAX_RECORDS_PER_BATCH:
                raise errors.InvalidArgument(f"at most {MAX_RECORDS_PER_BATCH} records per batch")
            records = list(batch.records)
            applied = await self.ctx.db.run(
                functools.partial(
                    ingest.apply_records, attempt_id=attempt_id, records=records, scope_job_id=principal.job_id
                )
            )
            if applied.logs_added:
                self.ctx.notifier.notify(f"logs:{applied.job_id}")
            if applied.transitions:
                self.ctx.notifier.notify(applied.job_id, f"logs:{applied.job_id}", "schedule", "reconcile")
            yield pb.ReportResponse(acked_seq=applied.acked_seq, signal=applied.signal)  # type: ignore[arg-type]

    async def GetCursor(self, request: pb.GetCursorRequest, context: Any) -> pb.GetCursorResponse:
        principal = auth.current()

        def read(s: Any) -> int:
            attempt = jobs.get_attempt(s, request.attempt_id)
            if attempt.job_id != principal.job_id:
                raise errors.PermissionDenied(
                    "this run token belongs to another run", reason=error_reason_pb2.ERROR_REASON_TOKEN_SCOPE
                )
            return ingest.cursor_for(s, attempt, for_update=False).acked_seq

        return pb.GetCursorResponse(acked_seq=await self.ctx.db.run(read))
