"""Uploading: only missing blobs, small files whole and several per message, 1 MiB chunks of large ones
(size first, finish last), batches of lookups."""

from __future__ import annotations

import hashlib
import pathlib
from typing import Any

import pytest
from starforge_api.control.v1 import blob_service_pb2 as bs

from cli import upload
from cli.errors import CliError
from cli.output import Output
from cli.pack import Pack, PackedFile, to_manifest
from tests.unit.cli.fakes import FakeClient
from tests.unit.cli.helpers import write


def _file(tmp_path: pathlib.Path, name: str, data: bytes) -> PackedFile:
    path = tmp_path / name
    path.write_bytes(data)
    return PackedFile(name, path, hashlib.sha256(data).hexdigest(), len(data), False)


def _messages(stream: Any) -> list[bs.UploadBlobsRequest]:
    """blob_chunks' stream as messages (its whole-blob messages come encoded)."""
    return [bs.UploadBlobsRequest.FromString(m) if isinstance(m, bytes) else m for m in stream]


@pytest.mark.parametrize("sizes", [[0], [1], [127, 128], [16383, 16384], [upload.CHUNK - 1], [0, 5, 0, 300_000]])
def test_whole_blobs_are_encoded_as_protobuf_encodes_them(sizes: list[int]) -> None:
    blobs = [(hashlib.sha256(bytes([i])).hexdigest(), bytes([i % 251]) * n) for i, n in enumerate(sizes)]
    encoded = b"".join(part for d, data in blobs for part in upload._whole_blob(d, data))
    expected = bs.UploadBlobsRequest(blobs=[bs.UploadBlobsRequest.WholeBlob(digest=d, data=data) for d, data in blobs])
    assert encoded == expected.SerializeToString()
    assert bs.UploadBlobsRequest.FromString(encoded) == expected
    assert [upload._varint(n) for n in (0, 127, 128, 16383, 16384, 2**21, 2**35)] == [
        b"\x00",
        b"\x7f",
        b"\x80\x01",
        b"\xff\x7f",
        b"\x80\x80\x01",
        b"\x80\x80\x80\x01",
        b"\x80\x80\x80\x80\x80\x01",
    ]


def test_small_files_travel_whole_and_large_ones_in_chunks(tmp_path: pathlib.Path) -> None:
    big = _file(tmp_path, "big", b"x" * (upload.CHUNK * 2 + 10))
    empty = _file(tmp_path, "empty", b"")
    small = _file(tmp_path, "small", b"s" * 1000)
    exact = _file(tmp_path, "exact", b"y" * upload.CHUNK)
    chunks = _messages(upload.blob_chunks([empty, small, big, exact]))
    assert [(b.digest, b.data) for b in chunks[0].blobs] == [
        (empty.sha256, b""),
        (small.sha256, pathlib.Path(small.real).read_bytes()),
    ]
    assert (chunks[0].digest, chunks[0].size, chunks[0].data, chunks[0].finish) == ("", 0, b"", False)
    assert [(c.digest == big.sha256, c.size, len(c.data), c.finish, len(c.blobs)) for c in chunks[1:4]] == [
        (True, big.size, upload.CHUNK, False, 0),
        (True, 0, upload.CHUNK, False, 0),
        (True, 0, 10, True, 0),
    ]
    assert (chunks[4].size, len(chunks[4].data), chunks[4].finish) == (upload.CHUNK, upload.CHUNK, True)
    assert len(chunks) == 5


def test_whole_blobs_are_packed_up_to_the_message_size(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upload, "MESSAGE_BYTES", 250)
    files = [_file(tmp_path, f"f{i}", bytes([i]) * 100) for i in range(5)]
    messages = _messages(upload.blob_chunks(files))
    assert [len(m.blobs) for m in messages] == [2, 2, 1]
    assert [b.digest for m in messages for b in m.blobs] == [f.sha256 for f in files]


@pytest.mark.parametrize("size", [10, upload.CHUNK + 5])
def test_a_file_whose_size_changed_stops_the_stream(tmp_path: pathlib.Path, size: int) -> None:
    f = _file(tmp_path, "a", b"h" * size)
    write(tmp_path / "a", "HELLO, longer now")
    problems: list[str] = []
    assert [m for m in _messages(upload.blob_chunks([f], problems=problems)) if m.finish or m.blobs] == []
    assert problems == ["a changed while it was being uploaded"]


def test_a_digest_mismatch_from_the_console_names_the_file(tmp_path: pathlib.Path) -> None:
    (tmp_path / "data").mkdir()
    f = _file(tmp_path, "data/a.bin", b"hello")
    message = f"blob content does not match its digest: declared {f.sha256}, content hashes to {'0' * 64}"
    assert upload._changed_file(message, [f]) == "data/a.bin"
    assert upload._changed_file("permission denied", [f]) is None


def _client(stored: set[str], batches: list[int], received: list[Any]) -> FakeClient:
    def find(req: bs.FindMissingBlobsRequest) -> bs.FindMissingBlobsResponse:
        batches.append(len(req.digests))
        return bs.FindMissingBlobsResponse(missing_digests=[d for d in req.digests if d not in stored])

    def up(requests: Any) -> bs.UploadBlobsResponse:
        for r in requests:
            if r.finish:
                received.append(r)
                stored.add(r.digest)
            for b in r.blobs:
                received.append(b)
                stored.add(b.digest)
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


def _unhashed(f: PackedFile) -> PackedFile:
    return PackedFile(f.path, f.real, "", f.size, f.executable)


def test_the_pipeline_hashes_ahead_on_threads_and_sends_each_blob_once(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upload, "PIPELINE_FILES", 3)  # several batches, each split over the threads
    files = [_file(tmp_path, f"f{i}", f"content {i % 7}".encode()) for i in range(20)]
    files.append(_file(tmp_path, "big", b"b" * (upload.CHUNK + 5)))
    pack = Pack([_unhashed(f) for f in files], to_manifest([]))
    received: list[Any] = []
    stats = upload.hash_and_upload(_client(set(), [], received), pack, Output())  # type: ignore[arg-type]
    assert [f.sha256 for f in pack.files] == [f.sha256 for f in files]
    assert sorted(r.digest for r in received) == sorted({f.sha256 for f in files})
    assert stats.files_uploaded == len(files)
    assert stats.bytes_uploaded == sum(len(f"content {i}") for i in range(7)) + upload.CHUNK + 5


def test_a_file_gone_while_hashed_ahead_is_named_and_later_batches_are_not_sent(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upload, "PIPELINE_FILES", 2)
    files = [_file(tmp_path, f"f{i}", f"content {i}".encode()) for i in range(8)]
    pathlib.Path(files[3].real).unlink()
    pack = Pack([_unhashed(f) for f in files], to_manifest([]))
    received: list[Any] = []
    with pytest.raises(CliError, match="upload failed: f3: No such file or directory"):
        upload.hash_and_upload(_client(set(), [], received), pack, Output())  # type: ignore[arg-type]
    assert {r.digest for r in received} <= {f.sha256 for f in files[:3]}
