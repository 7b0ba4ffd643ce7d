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
# Whole blobs of one UploadBlobs stream are stored in batches behind one durability barrier
# (BlobStore.put_many): a batch closes at this many bytes or blobs, and this many batches are
# written at once while the stream goes on. One fsync per small blob made a 10,000-file lab
# latency-bound (bench/packaging.py).
BATCH_BYTES = 8 << 20
BATCH_BLOBS = 2048
MAX_BATCHES_IN_FLIGHT = 3


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
        upload = _Upload(self.store)
        try:
            async for message in request_iterator:
                await upload.take(message)
            await upload.end()
            await self.access.record_uploads(principal, upload.uploaded)
        finally:
            await upload.abort()
        metrics.BLOB_BYTES.inc(upload.nbytes)
        metrics.BLOBS.labels("true").inc(upload.written)
        metrics.BLOBS.labels("false").inc(upload.present)
        return pb.UploadBlobsResponse(
            blobs_written=upload.written, bytes_written=upload.nbytes, blobs_already_present=upload.present
        )

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


class _Upload:
    """One UploadBlobs stream: whole blobs gathered into batches, large blobs written chunk by chunk."""

    def __init__(self, store: BlobStore) -> None:
        self.store = store
        self.written = self.present = self.nbytes = 0
        self.uploaded: set[str] = set()
        self._writer: BlobWriter | None = None
        self._batch: list[tuple[str, bytes]] = []
        self._batch_bytes = 0
        self._pending: set[asyncio.Future[list[tuple[bool, int]]]] = set()

    async def take(self, message: pb.UploadBlobsRequest) -> None:
        if message.blobs:
            if message.digest or message.data or message.size or message.finish:
                raise errors.InvalidArgument(
                    "an UploadBlobs message carries either one chunk (digest, size, data, finish) or "
                    "whole blobs, not both",
                    field_violations=(errors.FieldViolation("blobs", "set without digest, size, data or finish"),),
                )
            for blob in message.blobs:  # no await per blob: only when a batch is full
                if self._stage(blob.digest, blob.data):
                    await self._flush()
            return
        if self._writer is None and message.finish and message.size == len(message.data):
            await self._add(message.digest, message.data)  # a whole blob in one chunk (older clients)
            return
        await self._chunk(message)

    async def _add(self, digest: str, data: bytes) -> None:
        if self._stage(digest, data):
            await self._flush()

    def _stage(self, digest: str, data: bytes) -> bool:
        """Add a whole blob to the open batch; whether the batch is full."""
        if not is_digest(digest):
            raise errors.InvalidArgument(
                f"not a sha256 digest: {digest[:80]!r}",
                field_violations=(errors.FieldViolation("blobs.digest", "64 lowercase hex characters"),),
            )
        self._batch.append((digest, data))
        self._batch_bytes += len(data)
        return self._batch_bytes >= BATCH_BYTES or len(self._batch) >= BATCH_BLOBS

    async def _flush(self) -> None:
        if not self._batch:
            return
        await self._wait(MAX_BATCHES_IN_FLIGHT - 1)
        batch, self._batch, self._batch_bytes = self._batch, [], 0
        self.uploaded.update(d for d, _ in batch)
        self._pending.add(asyncio.ensure_future(asyncio.to_thread(self._put_batch, batch)))

    def _put_batch(self, batch: list[tuple[str, bytes]]) -> list[tuple[bool, int]]:
        return [(new, len(data)) for new, (_, data) in zip(self.store.put_many(batch), batch, strict=True)]

    async def _wait(self, until: int) -> None:
        while len(self._pending) > until:
            done, self._pending = await asyncio.wait(self._pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                for new, size in task.result():  # a batch's error is the stream's error
                    self._count(new, size)

    def _count(self, new: bool, size: int) -> None:
        if new:
            self.written += 1
            self.nbytes += size
        else:
            self.present += 1

    async def _chunk(self, message: pb.UploadBlobsRequest) -> None:
        writer = self._writer
        if writer is None or writer.digest != message.digest:
            if writer is not None:
                raise errors.InvalidArgument(
                    f"blob {writer.digest[:12]} ended without finish=true before {message.digest[:12]}"
                )
            writer = self._writer = self.store.writer(message.digest, message.size)
        if message.data:
            await asyncio.to_thread(writer.write, message.data)
        if message.finish:
            self.uploaded.add(writer.digest)
            self._count(await asyncio.to_thread(writer.finish), writer.size)
            self._writer = None

    async def end(self) -> None:
        if self._writer is not None:
            raise errors.InvalidArgument(f"blob {self._writer.digest[:12]}: stream ended before finish=true")
        await self._flush()
        await self._wait(0)

    async def abort(self) -> None:
        """After a failed stream: drop a partial blob, let the batches in flight end (they clean up
        after themselves)."""
        if self._writer is not None:
            self._writer.abort()
            self._writer = None
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
            self._pending.clear()
