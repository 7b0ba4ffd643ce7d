"""BlobService against a real server: upload, dedup, read back, digest mismatch, auth."""

from __future__ import annotations

import hashlib
import pathlib
from collections.abc import AsyncIterator

import grpc
import pytest
from starforge_api.control.v1 import blob_service_pb2 as pb
from starforge_api.control.v1 import blob_service_pb2_grpc as pb_grpc

from common.channel import aio_channel, bearer
from tests.integration.blob_server import blob_server


async def _upload(stub: pb_grpc.BlobServiceStub, token: str, blobs: list[bytes]) -> pb.UploadBlobsResponse:
    async def chunks() -> AsyncIterator[pb.UploadBlobsRequest]:
        for b in blobs:
            d = hashlib.sha256(b).hexdigest()
            yield pb.UploadBlobsRequest(digest=d, size=len(b), data=b[: len(b) // 2])
            yield pb.UploadBlobsRequest(digest=d, data=b[len(b) // 2 :], finish=True)

    response: pb.UploadBlobsResponse = await stub.UploadBlobs(chunks(), metadata=bearer(token), timeout=10)
    return response


async def test_upload_dedup_and_read(tmp_path: pathlib.Path) -> None:
    async with blob_server(tmp_path) as srv, aio_channel(srv.address) as ch:
        stub = pb_grpc.BlobServiceStub(ch)
        data = [b"hello world" * 1000, b"second"]
        digests = [hashlib.sha256(b).hexdigest() for b in data]
        missing = await stub.FindMissingBlobs(pb.FindMissingBlobsRequest(digests=digests), metadata=bearer(srv.token))
        assert list(missing.missing_digests) == digests
        r = await _upload(stub, srv.token, data)
        assert (r.blobs_written, r.bytes_written, r.blobs_already_present) == (2, len(data[0]) + len(data[1]), 0)
        r = await _upload(stub, srv.token, data)
        assert (r.blobs_written, r.bytes_written, r.blobs_already_present) == (0, 0, 2)
        missing = await stub.FindMissingBlobs(pb.FindMissingBlobsRequest(digests=digests), metadata=bearer(srv.token))
        assert list(missing.missing_digests) == []
        got = b"".join(
            [c.data async for c in stub.ReadBlob(pb.ReadBlobRequest(digest=digests[0]), metadata=bearer(srv.token))]
        )
        assert got == data[0]


async def test_digest_mismatch_refused_and_nothing_stored(tmp_path: pathlib.Path) -> None:
    async with blob_server(tmp_path) as srv, aio_channel(srv.address) as ch:
        stub = pb_grpc.BlobServiceStub(ch)
        wrong = "0" * 64

        async def chunks() -> AsyncIterator[pb.UploadBlobsRequest]:
            yield pb.UploadBlobsRequest(digest=wrong, size=3, data=b"abc", finish=True)

        with pytest.raises(grpc.aio.AioRpcError) as e:
            await stub.UploadBlobs(chunks(), metadata=bearer(srv.token), timeout=10)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "does not match its digest" in (e.value.details() or "")
        assert not srv.store.has(wrong)


@pytest.mark.parametrize("token", [None, "garbage", "sfp_0123456789_" + "x" * 43])
async def test_bad_tokens_refused(tmp_path: pathlib.Path, token: str | None) -> None:
    async with blob_server(tmp_path) as srv, aio_channel(srv.address) as ch:
        stub = pb_grpc.BlobServiceStub(ch)
        md = bearer(token) if token else ()
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await stub.FindMissingBlobs(pb.FindMissingBlobsRequest(digests=[]), metadata=md, timeout=10)
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "Traceback" not in (e.value.details() or "")


async def test_whole_blobs_several_per_message_stored_once_and_durable(tmp_path: pathlib.Path) -> None:
    async with blob_server(tmp_path) as srv, aio_channel(srv.address) as ch:
        stub = pb_grpc.BlobServiceStub(ch)
        data = [f"small file {i}".encode() * (i + 1) for i in range(300)] + [b""]

        async def messages() -> AsyncIterator[pb.UploadBlobsRequest]:
            for i in range(0, len(data), 50):
                msg = pb.UploadBlobsRequest()
                for b in data[i : i + 50]:
                    msg.blobs.add(digest=hashlib.sha256(b).hexdigest(), data=b)
                yield msg
            msg = pb.UploadBlobsRequest()
            msg.blobs.add(digest=hashlib.sha256(data[0]).hexdigest(), data=data[0])  # a duplicate
            yield msg

        r = await stub.UploadBlobs(messages(), metadata=bearer(srv.token), timeout=30)
        assert (r.blobs_written, r.bytes_written, r.blobs_already_present) == (301, sum(map(len, data)), 1)
        for b in data:
            assert srv.store.read_bytes(hashlib.sha256(b).hexdigest()) == b
        assert list((srv.store.root / "tmp").iterdir()) == []  # every staged file was published


async def test_one_bad_whole_blob_fails_the_upload_and_publishes_nothing_of_its_batch(tmp_path: pathlib.Path) -> None:
    async with blob_server(tmp_path) as srv, aio_channel(srv.address) as ch:
        stub = pb_grpc.BlobServiceStub(ch)
        good = b"good content"

        async def messages() -> AsyncIterator[pb.UploadBlobsRequest]:
            msg = pb.UploadBlobsRequest()
            msg.blobs.add(digest=hashlib.sha256(good).hexdigest(), data=good)
            msg.blobs.add(digest=hashlib.sha256(b"what was hashed").hexdigest(), data=b"what was sent!!")
            yield msg

        with pytest.raises(grpc.aio.AioRpcError) as e:
            await stub.UploadBlobs(messages(), metadata=bearer(srv.token), timeout=10)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "does not match its digest" in (e.value.details() or "")
        assert not srv.store.has(hashlib.sha256(good).hexdigest())
        assert list((srv.store.root / "tmp").iterdir()) == []


async def test_a_message_with_a_chunk_and_whole_blobs_is_refused(tmp_path: pathlib.Path) -> None:
    async with blob_server(tmp_path) as srv, aio_channel(srv.address) as ch:
        stub = pb_grpc.BlobServiceStub(ch)

        async def messages() -> AsyncIterator[pb.UploadBlobsRequest]:
            msg = pb.UploadBlobsRequest(digest=hashlib.sha256(b"x").hexdigest(), size=1, data=b"x", finish=True)
            msg.blobs.add(digest=hashlib.sha256(b"y").hexdigest(), data=b"y")
            yield msg

        with pytest.raises(grpc.aio.AioRpcError) as e:
            await stub.UploadBlobs(messages(), metadata=bearer(srv.token), timeout=10)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "either one chunk" in (e.value.details() or "")
