"""ControlService servicer: proto -> JobsApi -> proto."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from google.protobuf import timestamp_pb2
from starforge_api.control.v1 import control_service_pb2 as pb
from starforge_api.control.v1 import control_service_pb2_grpc as pb_grpc
from starforge_api.job.v1 import telemetry_pb2

from common import __version__, errors
from control import auth
from control.artifacts import JobArtifacts
from control.context import Context
from control.jobs_api import JobsApi
from control.telemetry.log_tail import LogBatch


def _require(value: str, field: str) -> str:
    if not value:
        raise errors.InvalidArgument(f"{field} is required", field_violations=(errors.FieldViolation(field, "empty"),))
    return value


def _logs_response(batch: LogBatch) -> pb.StreamJobLogsResponse:
    return pb.StreamJobLogsResponse(lines=batch.lines, final_state=batch.final_state)  # type: ignore[arg-type]


class ControlServicer(pb_grpc.ControlServiceServicer):
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.api = JobsApi(ctx)
        self.artifacts = JobArtifacts(ctx)

    async def SubmitJob(self, request: pb.SubmitJobRequest, context: Any) -> pb.SubmitJobResponse:
        r = await self.api.submit(
            auth.current(), request.spec, request.request_id, request.dry_run, request.workspace_digest
        )
        return pb.SubmitJobResponse(job=r.job, warnings=r.warnings)

    async def GetJob(self, request: pb.GetJobRequest, context: Any) -> pb.GetJobResponse:
        return pb.GetJobResponse(job=await self.api.get(auth.current(), _require(request.job_id, "job_id")))

    async def ListJobs(self, request: pb.ListJobsRequest, context: Any) -> pb.ListJobsResponse:
        found, token = await self.api.list_jobs(
            auth.current(),
            project=request.project,
            owner=request.owner,
            states=list(request.states),
            experiment=request.experiment,
            page_size=request.page_size,
            page_token=request.page_token,
            labels=dict(request.labels),
        )
        return pb.ListJobsResponse(jobs=found, next_page_token=token)

    async def StopJob(self, request: pb.StopJobRequest, context: Any) -> pb.StopJobResponse:
        job = await self.api.stop(auth.current(), _require(request.job_id, "job_id"), request.reason)
        return pb.StopJobResponse(job=job)

    async def PauseJob(self, request: pb.PauseJobRequest, context: Any) -> pb.PauseJobResponse:
        job = await self.api.pause(auth.current(), _require(request.job_id, "job_id"), request.reason)
        return pb.PauseJobResponse(job=job)

    async def ResumeJob(self, request: pb.ResumeJobRequest, context: Any) -> pb.ResumeJobResponse:
        job = await self.api.requeue(auth.current(), _require(request.job_id, "job_id"), "resume")
        return pb.ResumeJobResponse(job=job)

    async def RetryJob(self, request: pb.RetryJobRequest, context: Any) -> pb.RetryJobResponse:
        job = await self.api.requeue(auth.current(), _require(request.job_id, "job_id"), "retry")
        return pb.RetryJobResponse(job=job)

    async def StreamJobLogs(
        self, request: pb.StreamJobLogsRequest, context: Any
    ) -> AsyncIterator[pb.StreamJobLogsResponse]:
        if request.before_attempt_number > 0:
            yield pb.StreamJobLogsResponse(lines=await self._earlier_logs(request))
            return
        async for batch in self.api.stream_logs(
            auth.current(),
            _require(request.job_id, "job_id"),
            request.tail_lines,
            request.follow,
            request.attempt_number,
            (request.after_attempt_number, request.after_offset) if request.after_attempt_number > 0 else None,
        ):
            # one message per batch, whichever followers share it (it is never changed once built)
            yield batch.message(_logs_response)

    async def _earlier_logs(self, request: pb.StreamJobLogsRequest) -> list[telemetry_pb2.LogLine]:
        """StreamJobLogs with a before cursor: one page of older lines, never followed."""
        clash = [f for f in ("follow", "after_attempt_number") if getattr(request, f)]
        if clash:
            why = "not allowed with before_attempt_number"
            raise errors.InvalidArgument(
                "a before cursor reads one page of older lines: it cannot be combined with " + " or ".join(clash),
                field_violations=tuple(errors.FieldViolation(f, why) for f in clash),
            )
        return await self.api.earlier_logs(
            auth.current(),
            _require(request.job_id, "job_id"),
            (request.before_attempt_number, request.before_offset),
            request.tail_lines,
            request.attempt_number,
        )

    async def WatchJob(self, request: pb.WatchJobRequest, context: Any) -> AsyncIterator[pb.WatchJobResponse]:
        async for event, job in self.api.watch(
            auth.current(), _require(request.job_id, "job_id"), request.after_sequence
        ):
            yield pb.WatchJobResponse(event=event, job=job)

    async def GetJobMetrics(self, request: pb.GetJobMetricsRequest, context: Any) -> pb.GetJobMetricsResponse:
        series = await self.api.metrics(
            auth.current(),
            _require(request.job_id, "job_id"),
            list(request.names),
            request.max_points,
            request.after_step,
            request.up_to_step,
        )
        return pb.GetJobMetricsResponse(series=series)

    async def GetJobSamples(self, request: pb.GetJobSamplesRequest, context: Any) -> pb.GetJobSamplesResponse:
        samples = await self.api.samples(auth.current(), _require(request.job_id, "job_id"), request.limit)
        return pb.GetJobSamplesResponse(samples=samples)

    async def GetServerInfo(self, request: pb.GetServerInfoRequest, context: Any) -> pb.GetServerInfoResponse:
        p = auth.current()
        now = timestamp_pb2.Timestamp()
        now.GetCurrentTime()
        return pb.GetServerInfoResponse(
            version=__version__,
            user=p.user,
            admin=p.admin,
            catalog_digest=self.ctx.catalog.digest,
            time=now,
            runner_digest=self.ctx.assets.runner_digest,
        )

    async def ListJobArtifacts(self, request: pb.ListJobArtifactsRequest, context: Any) -> pb.ListJobArtifactsResponse:
        artifacts, token, attempt_id = await self.artifacts.list(
            auth.current(), _require(request.job_id, "job_id"), request.page_size, request.page_token
        )
        return pb.ListJobArtifactsResponse(artifacts=artifacts, next_page_token=token, attempt_id=attempt_id)

    async def DownloadJobArtifact(
        self, request: pb.DownloadJobArtifactRequest, context: Any
    ) -> AsyncIterator[pb.DownloadJobArtifactResponse]:
        async for offset, data, size in self.artifacts.download(
            auth.current(), _require(request.job_id, "job_id"), _require(request.path, "path"), request.offset
        ):
            yield pb.DownloadJobArtifactResponse(offset=offset, data=data, size=size)
