"""BlobService: the content-addressed store, over gRPC. Who may read or probe what: control/blob_access.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from starforge_api.control.v1 import blob_service_pb2 as pb
from starforge_api.control.v1 import blob_service_pb2_grpc as pb_grpc
from starforge_api.control.v1 import error_reason_pb2

from common import errors
from common.hashing import is_digest
from control import auth, metrics
from control.blob_access import BlobAccess
from control.blobstore import BlobStore, BlobWriter

MAX_FIND = 100_000
# Whole small blobs of one UploadBlobs stream written at once (their fsyncs overlap).
MAX_PARALLEL_WRITES = 16


class BlobServicer(pb_grpc.BlobServiceServicer):
    def __init__(self, store: BlobStore, access: BlobAccess) -> None:
        self.store = store
        self.access = access

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
        absent = set(missing)
        # Content the caller may not read is "missing" to them: the answer never tells whether
        # someone else uploaded it, and the re-upload records the caller as an owner.
        hidden = await self.access.hidden(auth.current(), [d for d in request.digests if d not in absent])
        return pb.FindMissingBlobsResponse(missing_digests=[d for d in request.digests if d in absent or d in hidden])

    async def UploadBlobs(
        self, request_iterator: AsyncIterator[pb.UploadBlobsRequest], context: Any
    ) -> pb.UploadBlobsResponse:
        principal = auth.current()
        written = present = 0
        nbytes = 0
        uploaded: set[str] = set()
        writer: BlobWriter | None = None
        pending: set[asyncio.Future[tuple[bool, int]]] = set()
        in_flight: set[str] = set()

        def settle(done: set[asyncio.Future[tuple[bool, int]]]) -> None:
            nonlocal written, present, nbytes
            for task in done:
                new, size = task.result()  # a blob's error is the stream's error
                if new:
                    written += 1
                    nbytes += size
                else:
                    present += 1

        async def wait(until: int) -> None:
            nonlocal pending
            while len(pending) > until:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                settle(done)
            if not pending:
                in_flight.clear()

        try:
            async for chunk in request_iterator:
                if writer is None and chunk.finish and chunk.size == len(chunk.data):
                    # A whole blob in one message (every small file of a lab): written, verified and
                    # published in one worker-thread call, several at once so that their fsyncs
                    # overlap. One blob at a time with two thread hops each made a 10,000-file lab
                    # latency-bound (bench/packaging.py).
                    if chunk.digest in in_flight:
                        await wait(0)
                    await wait(MAX_PARALLEL_WRITES - 1)
                    in_flight.add(chunk.digest)
                    uploaded.add(chunk.digest)
                    pending.add(
                        asyncio.ensure_future(asyncio.to_thread(self._put, chunk.digest, chunk.size, chunk.data))
                    )
                    continue
                if writer is None or writer.digest != chunk.digest:
                    if writer is not None:
                        raise errors.InvalidArgument(
                            f"blob {writer.digest[:12]} ended without finish=true before {chunk.digest[:12]}"
                        )
                    writer = self.store.writer(chunk.digest, chunk.size)
                if chunk.data:
                    await asyncio.to_thread(writer.write, chunk.data)
                if chunk.finish:
                    uploaded.add(writer.digest)
                    if await asyncio.to_thread(writer.finish):
                        written += 1
                        nbytes += writer.size
                    else:
                        present += 1
                    writer = None
            if writer is not None:
                raise errors.InvalidArgument(f"blob {writer.digest[:12]}: stream ended before finish=true")
            await wait(0)
            await self.access.record_uploads(principal, uploaded)
        finally:
            if writer is not None:
                writer.abort()
            if pending:  # the stream failed: let the writes in flight end (they clean up after themselves)
                await asyncio.gather(*pending, return_exceptions=True)
        metrics.BLOB_BYTES.inc(nbytes)
        metrics.BLOBS.labels("true").inc(written)
        metrics.BLOBS.labels("false").inc(present)
        return pb.UploadBlobsResponse(blobs_written=written, bytes_written=nbytes, blobs_already_present=present)

    def _put(self, digest: str, size: int, data: bytes) -> tuple[bool, int]:
        """Write, verify and publish a whole blob; (newly written, size)."""
        writer = self.store.writer(digest, size)
        try:
            writer.write(data)
            return writer.finish(), writer.size
        except BaseException:
            writer.abort()
            raise

    async def ReadBlob(self, request: pb.ReadBlobRequest, context: Any) -> AsyncIterator[pb.ReadBlobResponse]:
        principal = auth.current()
        if request.offset < 0:
            raise errors.InvalidArgument("offset must not be negative")
        if not await self.access.may_read(principal, request.digest):
            if principal.kind == "run":
                raise errors.PermissionDenied(
                    "this run token may only read its own attempt's blobs",
                    reason=error_reason_pb2.ERROR_REASON_TOKEN_SCOPE,
                )
            # The same answer as for content that does not exist: nothing to probe.
            raise errors.NotFound(f"blob {request.digest} not found")
        if not await asyncio.to_thread(self.store.has, request.digest):
            raise errors.NotFound(f"blob {request.digest} not found")
        chunks = self.store.read(request.digest, request.offset)
        while True:
            chunk = await asyncio.to_thread(next, chunks, None)
            if chunk is None:
                return
            yield pb.ReadBlobResponse(data=chunk)
