"""A job's artifacts: what it left in FORGE_OUT_DIR, listed and streamed from the executor that
holds them (the one of the job's latest attempt that ran).

Who may: whoever may see the job (`jobs_api.visible_job`: its owner, admins), asked first; then the
path rule (`common.artifact_paths`) before any executor is called. The executor applies the same
rule again and never follows a link (executor_svc/out_files.py). The executor token never leaves
the control plane: users reach artifacts only through these calls.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from sqlalchemy.orm import Session
from starforge_api.executor.v1 import executor_service_pb2 as ex
from starforge_api.executor.v1 import launch_request_pb2 as lr
from starforge_api.job.v1 import artifact_pb2

from common import errors
from common.artifact_paths import split_path
from control.auth import Principal
from control.context import Context
from control.jobs_api import visible_job
from control.ledger import jobs


@dataclass(frozen=True)
class OutDir:
    """Where a job's FORGE_OUT_DIR lives: fleet, attempt, out key and node."""

    fleet: str
    attempt_id: str
    out_key: str
    node: str


def locate(s: Session, principal: Principal, job_id: str) -> OutDir:
    """The out dir of the job's latest attempt that an executor accepted, for a caller who may see it."""
    job = visible_job(s, principal, job_id)
    launched = [a for a in jobs.attempts_of(s, job.id) if a.fleet and a.backend_handle and a.launch]
    if not launched:
        raise errors.FailedPrecondition(
            f"job {job.id} has not run yet: its artifacts appear once an attempt has started"
        )
    attempt = launched[-1]
    request = lr.LaunchRequest.FromString(attempt.launch)
    return OutDir(attempt.fleet, attempt.id, request.out_key or request.job_id, attempt.node)


class JobArtifacts:
    """ListJobArtifacts and DownloadJobArtifact."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def _locate(self, principal: Principal, job_id: str) -> OutDir:
        return await self.ctx.db.run(lambda s: locate(s, principal, job_id))

    async def list(
        self, principal: Principal, job_id: str, page_size: int, page_token: str
    ) -> tuple[list[artifact_pb2.Artifact], str, str]:
        """(artifacts, next_page_token, attempt_id)."""
        if page_token:
            split_path(page_token, "page_token")
        out = await self._locate(principal, job_id)
        r = await self.ctx.executors.list_artifacts(
            out.fleet,
            ex.ListArtifactsRequest(
                attempt_id=out.attempt_id,
                out_key=out.out_key,
                node=out.node,
                page_size=page_size,
                page_token=page_token,
            ),
        )
        return list(r.artifacts), r.next_page_token, out.attempt_id

    async def download(
        self, principal: Principal, job_id: str, path: str, offset: int
    ) -> AsyncIterator[tuple[int, bytes, int]]:
        """(offset, data, size) chunks of one file from `offset`."""
        split_path(path)
        if offset < 0:
            raise errors.InvalidArgument(
                "offset must not be negative", field_violations=(errors.FieldViolation("offset", "negative"),)
            )
        out = await self._locate(principal, job_id)
        request = ex.ReadArtifactRequest(
            attempt_id=out.attempt_id, out_key=out.out_key, node=out.node, path=path, offset=offset
        )
        async for chunk in self.ctx.executors.read_artifact(out.fleet, request):
            yield chunk.offset, chunk.data, chunk.size
