"""A small but honest IngestService for capsule tests (gen/python grpcio stubs, grpc.aio).

It stores records once per sequence number, acknowledges the highest contiguous one, answers
GetCursor, checks the bearer token, and can be stopped and restarted on the same port while keeping
what it stored (as the control plane's database would).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
from starforge_api.ingest.v1 import ingest_service_pb2 as pb
from starforge_api.ingest.v1 import ingest_service_pb2_grpc as pb_grpc
from starforge_api.job.v1 import lifecycle_event_pb2 as lpb
from starforge_api.job.v1 import telemetry_pb2 as tpb


class FakeIngest(pb_grpc.IngestServiceServicer):
    def __init__(self, *, token: str, attempt_id: str) -> None:
        self.token = token
        self.attempt_id = attempt_id
        self.records: dict[int, pb.Record] = {}
        self.acked = 0
        self.signal = pb.CONTROL_SIGNAL_UNSPECIFIED
        self.cursor_calls = 0
        self.report_streams = 0
        # "cursor" and "report", in the order the calls came
        self.calls: list[str] = []
        self.duplicates = 0
        # Store the next N batches, then drop the stream before acknowledging them.
        self.lose_acks = 0
        self.changed = asyncio.Event()
        self._server: grpc.aio.Server | None = None
        self.port = 0

    # -- service ---------------------------------------------------------------------------

    async def _check(self, context: grpc.aio.ServicerContext[Any, Any], attempt_id: str) -> None:
        metadata = dict(context.invocation_metadata() or ())
        if metadata.get("authorization") != f"Bearer {self.token}":
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad ingest token")
        if attempt_id != self.attempt_id:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"token is not for {attempt_id}")

    async def GetCursor(
        self, request: pb.GetCursorRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.GetCursorResponse:
        await self._check(context, request.attempt_id)
        self.cursor_calls += 1
        self.calls.append("cursor")
        return pb.GetCursorResponse(acked_seq=self.acked)

    async def Report(
        self, request_iterator: AsyncIterator[pb.ReportRequest], context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.ReportResponse]:
        self.report_streams += 1
        self.calls.append("report")
        checked = False
        async for request in request_iterator:
            if not checked:
                await self._check(context, request.attempt_id)
                checked = True
            for record in request.records:
                if record.seq <= self.acked:
                    self.duplicates += 1
                    continue
                if record.seq != self.acked + 1:
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"gap before seq {record.seq}")
                self.records[record.seq] = record
                self.acked = record.seq
            self.changed.set()
            if self.lose_acks > 0:
                self.lose_acks -= 1
                await context.abort(grpc.StatusCode.UNAVAILABLE, "connection lost before the ack")
            yield pb.ReportResponse(acked_seq=self.acked, signal=self.signal)

    # -- server ----------------------------------------------------------------------------

    async def start(self, port: int = 0) -> int:
        server = grpc.aio.server()
        pb_grpc.add_IngestServiceServicer_to_server(self, server)
        self.port = server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        self._server = server
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    # -- reading what arrived --------------------------------------------------------------

    def ordered(self) -> list[pb.Record]:
        return [self.records[seq] for seq in sorted(self.records)]

    def lifecycle(self) -> list[lpb.LifecycleEvent]:
        return [r.lifecycle for r in self.ordered() if r.WhichOneof("body") == "lifecycle"]

    def phases(self) -> list[str]:
        return [lpb.LifecyclePhase.Name(e.phase) for e in self.lifecycle()]

    def lines(self, stream: int) -> list[str]:
        out: list[str] = []
        for r in self.ordered():
            if r.WhichOneof("body") == "log_chunk" and r.log_chunk.stream == stream:
                out.extend(r.log_chunk.lines)
        return out

    def stdout(self) -> list[str]:
        return self.lines(tpb.LOG_STREAM_STDOUT)

    def stderr(self) -> list[str]:
        return self.lines(tpb.LOG_STREAM_STDERR)

    def system(self) -> list[str]:
        return self.lines(tpb.LOG_STREAM_SYSTEM)

    def points(self) -> list[tpb.MetricPoint]:
        """Every metric point reported, as MetricPoint messages: a record's `points`, then its
        `columns` one name after the other."""
        out: list[tpb.MetricPoint] = []
        for r in self.ordered():
            if r.WhichOneof("body") != "metrics":
                continue
            out.extend(r.metrics.points)
            for col in r.metrics.columns:
                times = list(col.times) or [0.0] * len(col.steps)
                for step, value, at in zip(col.steps, col.values, times, strict=True):
                    point = tpb.MetricPoint(step=step, name=col.name, value=value)
                    if at:
                        point.time.FromNanoseconds(round(at * 1e9))
                    out.append(point)
        return out

    def samples(self) -> list[tpb.Sample]:
        return [s for r in self.ordered() if r.WhichOneof("body") == "samples" for s in r.samples.samples]
