"""Uploading: only missing blobs, 1 MiB chunks with size first and finish last, batches of lookups."""

from __future__ import annotations

import hashlib
import pathlib
from typing import Any

import pytest
from starforge_api.control.v1 import blob_service_pb2 as bs

from cli import upload
from cli.output import Output
from cli.pack import PackedFile
from tests.unit.cli.fakes import FakeClient
from tests.unit.cli.helpers import write


def _file(tmp_path: pathlib.Path, name: str, data: bytes) -> PackedFile:
    path = tmp_path / name
    path.write_bytes(data)
    return PackedFile(name, path, hashlib.sha256(data).hexdigest(), len(data), False)


def test_chunks_carry_size_first_and_finish_last(tmp_path: pathlib.Path) -> None:
    big = _file(tmp_path, "big", b"x" * (upload.CHUNK * 2 + 10))
    empty = _file(tmp_path, "empty", b"")
    exact = _file(tmp_path, "exact", b"y" * upload.CHUNK)
    chunks = list(upload.blob_chunks([big, empty, exact]))
    assert [(c.digest == big.sha256, c.size, len(c.data), c.finish) for c in chunks[:3]] == [
        (True, big.size, upload.CHUNK, False),
        (True, 0, upload.CHUNK, False),
        (True, 0, 10, True),
    ]
    assert (chunks[3].digest, chunks[3].size, chunks[3].data, chunks[3].finish) == (empty.sha256, 0, b"", True)
    assert (chunks[4].size, len(chunks[4].data), chunks[4].finish) == (upload.CHUNK, upload.CHUNK, True)
    assert len(chunks) == 5


def test_changed_file_stops_the_stream(tmp_path: pathlib.Path) -> None:
    f = _file(tmp_path, "a", b"hello")
    write(tmp_path / "a", "HELLO")
    problems: list[str] = []
    assert list(upload.blob_chunks([f], problems=problems)) == []
    assert problems == ["a changed while it was being uploaded"]


def _client(stored: set[str], batches: list[int], received: list[Any]) -> FakeClient:
    def find(req: bs.FindMissingBlobsRequest) -> bs.FindMissingBlobsResponse:
        batches.append(len(req.digests))
        return bs.FindMissingBlobsResponse(missing_digests=[d for d in req.digests if d not in stored])

    def up(requests: Any) -> bs.UploadBlobsResponse:
        for r in requests:
            received.append(r)
            if r.finish:
                stored.add(r.digest)
        return bs.UploadBlobsResponse()

    return FakeClient({"FindMissingBlobs": find, "UploadBlobs": up})


def test_upload_only_missing_and_unchanged_uploads_nothing(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upload, "FIND_BATCH", 2)
    files = [_file(tmp_path, f"f{i}", f"content {i}".encode()) for i in range(5)]
    dup = PackedFile("copy", files[0].real, files[0].sha256, files[0].size, False)
    stored = {files[4].sha256}
    batches: list[int] = []
    received: list[Any] = []
    client = _client(stored, batches, received)
    stats = upload.upload_files(client, [*files, dup], Output())  # type: ignore[arg-type]
    assert batches == [2, 2, 1]  # 5 distinct digests in batches of 2
    assert stats.files_uploaded == 5
    assert stats.files_unchanged == 1
    assert stats.bytes_uploaded == sum(f.size for f in files[:4])
    assert len({r.digest for r in received}) == 4  # each distinct blob once
    assert stats.summary().startswith("uploaded 5 file(s) (")
    received.clear()
    again = upload.upload_files(client, files, Output())  # type: ignore[arg-type]
    assert again.bytes_uploaded == 0
    assert again.files_uploaded == 0
    assert again.files_unchanged == 5
    assert received == []
    assert again.summary() == "uploaded 0 file(s) (0 B), 5 unchanged"
