"""BlobService: the content-addressed store, over gRPC."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starforge.control.v1 import blob_service_pb2 as pb
from starforge.control.v1 import blob_service_pb2_grpc as pb_grpc
from starforge.control.v1 import error_reason_pb2

from common import errors
from common.hashing import is_digest
from control import auth, metrics
from control.blobstore import BlobStore, BlobWriter

MAX_FIND = 100_000

# Returns True when `digest` belongs to job `job_id` (its workspace, capsule or datasets).
RunBlobCheck = Callable[[str, str], Awaitable[bool]]


class BlobServicer(pb_grpc.BlobServiceServicer):
    def __init__(self, store: BlobStore, run_blob_check: RunBlobCheck) -> None:
        self.store = store
        self.run_blob_check = run_blob_check

    async def FindMissingBlobs(self, request: pb.FindMissingBlobsRequest, context: Any) -> pb.FindMissingBlobsResponse:
        if len(request.digests) > MAX_FIND:
            raise errors.InvalidArgument(f"at most {MAX_FIND} digests per call, got {len(request.digests)}")
        bad = [d for d in request.digests if not is_digest(d)]
        if bad:
            raise errors.InvalidArgument(
                f"not a sha256 digest: {bad[0][:80]!r}",
                field_violations=(errors.FieldViolation("digests", "64 lowercase hex characters"),),
            )
        missing = await asyncio.to_thread(self.store.missing, list(request.digests))
        return pb.FindMissingBlobsResponse(missing_digests=missing)

    async def UploadBlobs(
        self, request_iterator: AsyncIterator[pb.UploadBlobsRequest], context: Any
    ) -> pb.UploadBlobsResponse:
        written = present = 0
        nbytes = 0
        writer: BlobWriter | None = None
        try:
            async for chunk in request_iterator:
                if writer is None or writer.digest != chunk.digest:
                    if writer is not None:
                        raise errors.InvalidArgument(
                            f"blob {writer.digest[:12]} ended without finish=true before {chunk.digest[:12]}"
                        )
                    writer = self.store.writer(chunk.digest, chunk.size)
                if chunk.data:
                    await asyncio.to_thread(writer.write, chunk.data)
                if chunk.finish:
                    if await asyncio.to_thread(writer.finish):
                        written += 1
                        nbytes += writer.size
                    else:
                        present += 1
                    writer = None
            if writer is not None:
                raise errors.InvalidArgument(f"blob {writer.digest[:12]}: stream ended before finish=true")
        finally:
            if writer is not None:
                writer.abort()
        metrics.BLOB_BYTES.inc(nbytes)
        metrics.BLOBS.labels("true").inc(written)
        metrics.BLOBS.labels("false").inc(present)
        return pb.UploadBlobsResponse(blobs_written=written, bytes_written=nbytes, blobs_already_present=present)

    async def ReadBlob(self, request: pb.ReadBlobRequest, context: Any) -> AsyncIterator[pb.ReadBlobResponse]:
        principal = auth.current()
        if principal.kind == "run" and not (
            principal.job_id and await self.run_blob_check(principal.job_id, request.digest)
        ):
            raise errors.PermissionDenied(
                "this run token may only read its own run's blobs",
                reason=error_reason_pb2.ERROR_REASON_TOKEN_SCOPE,
            )
        if request.offset < 0:
            raise errors.InvalidArgument("offset must not be negative")
        if not await asyncio.to_thread(self.store.has, request.digest):
            raise errors.NotFound(f"blob {request.digest} not found")
        chunks = self.store.read(request.digest, request.offset)
        while True:
            chunk = await asyncio.to_thread(next, chunks, None)
            if chunk is None:
                return
            yield pb.ReadBlobResponse(data=chunk)
