"""Upload a packed workspace's content to the console's BlobService.

Blobs are named by their sha256, so only content the console lacks is sent: FindMissingBlobs in
batches of at most 10,000 digests, then one UploadBlobs stream: files under 1 MiB whole, several
per message; larger ones in 1 MiB chunks (the first chunk of a blob carries its size, the last one
`finish`). An unchanged lab therefore uploads 0 bytes.

Files the hash cache did not know (`hash_and_upload`, after pack_lab's defer_hashing) are hashed
as a pipeline with the upload: a batch of files is read and hashed, its digests asked about, and
what the console lacks is sent while the next batch is hashed, so that the console verifies and
stores while `sf` still hashes. A small file is read once: the bytes hashed are the bytes sent.
A progress bar (bytes, speed) is shown only when a person watches stderr.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from starforge_api.control.v1 import blob_service_pb2

from cli.errors import CliError
from cli.output import Output, human_bytes
from cli.pack import Pack, PackedFile
from common.hashing import sha256_file

if TYPE_CHECKING:  # grpcio: loaded by the client that uploads, not by `sf submit` of an unchanged lab
    from cli.client import Client

CHUNK = 1 << 20
# Whole small files per UploadBlobs message: under the console's 4 MiB message limit.
MESSAGE_BYTES = 2 << 20
FIND_BATCH = 10_000
# Files hashed before their digests are asked about and the missing ones sent (hash_and_upload):
# small enough that the console starts verifying early, large enough for few round trips.
PIPELINE_BYTES = 8 << 20
PIPELINE_FILES = 1000


@dataclass(frozen=True)
class UploadStats:
    """What an upload did, for the one summary line."""

    files_uploaded: int
    bytes_uploaded: int
    files_unchanged: int

    def summary(self) -> str:
        return (
            f"uploaded {self.files_uploaded} file(s) ({human_bytes(self.bytes_uploaded)}), "
            f"{self.files_unchanged} unchanged"
        )


def _changed_file(message: str, blobs: Sequence[PackedFile]) -> str | None:
    """The file whose content the console found not to hash to its digest (it changed after `sf`
    hashed it), from the console's INVALID_ARGUMENT message."""
    marker = "declared "
    at = message.find(marker)
    if "does not match its digest" not in message or at < 0:
        return None
    digest = message[at + len(marker) : at + len(marker) + 64]
    return next((b.path for b in blobs if b.sha256 == digest), None)


def find_missing(client: Client, digests: Sequence[str]) -> set[str]:
    """The digests the console does not have, asked in batches of FIND_BATCH."""
    missing: set[str] = set()
    for i in range(0, len(digests), FIND_BATCH):
        batch = list(digests[i : i + FIND_BATCH])
        resp = client.call(client.blobs.FindMissingBlobs, blob_service_pb2.FindMissingBlobsRequest(digests=batch))
        missing.update(resp.missing_digests)
    return missing


def blob_chunks(
    blobs: Sequence[PackedFile],
    on_bytes: Callable[[int], None] = lambda n: None,
    problems: list[str] | None = None,
    contents: dict[str, bytes] | None = None,
) -> Iterator[bytes | blob_service_pb2.UploadBlobsRequest]:
    """The UploadBlobs request stream for `blobs` (one PackedFile per distinct digest).

    Files under CHUNK bytes travel whole, several per message (up to MESSAGE_BYTES), each such
    message yielded already encoded (`_whole_blob`; `Client.blob_upload` sends it as it is);
    larger ones as chunks. Content is not hashed again here: the console verifies every blob against its
    digest, and a file whose size changed since it was hashed ends the stream early and is
    reported in `problems` (raising here would make grpc log a traceback from its sending thread).
    `contents`: small blobs already read (and hashed), by digest.
    """
    batch: list[bytes] = []  # the message's encoded `blobs` entries (see _whole_blob)
    batch_bytes = 0
    for blob in blobs:
        if blob.size < CHUNK:
            data = contents.get(blob.sha256) if contents else None
            if data is None:
                data = _read_whole(blob, problems)
            if data is None:
                return
            if batch_bytes + len(data) > MESSAGE_BYTES and batch_bytes:
                yield b"".join(batch)
                batch, batch_bytes = [], 0
            batch += _whole_blob(blob.sha256, data)
            batch_bytes += len(data)
            on_bytes(len(data))
            continue
        if batch:
            yield b"".join(batch)
            batch, batch_bytes = [], 0
        for chunk in _chunked(blob, problems):
            if chunk is None:
                return
            yield chunk
            on_bytes(len(chunk.data))
    if batch:
        yield b"".join(batch)


def _varint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    if n < 0x4000:
        return bytes((n & 0x7F | 0x80, n >> 7))
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# UploadBlobsRequest field 5 (`blobs`, a WholeBlob) and WholeBlob's fields 1 (`digest`) and 2
# (`data`), each length-delimited (wire type 2): the tag bytes of the protobuf encoding.
_BLOBS_TAG, _DIGEST_TAG, _DATA_TAG = b"\x2a", b"\x0a", b"\x12"


def _whole_blob(digest: str, data: bytes) -> tuple[bytes, bytes]:
    """One `blobs` entry of an UploadBlobsRequest in its protobuf encoding, as (header, data):
    the bytes protobuf writes for `UploadBlobsRequest(blobs=[WholeBlob(digest, data)])`, without
    copying `data` into a message and the message into its encoding (two copies of every byte
    sent, most of the CPU of building the stream). Empty fields are left out, as protobuf does."""
    raw = digest.encode()  # protobuf writes a string as UTF-8
    body = (_DIGEST_TAG + _varint(len(raw)) + raw if raw else b"") + (_DATA_TAG + _varint(len(data)) if data else b"")
    return _BLOBS_TAG + _varint(len(body) + len(data)) + body, data


def _read_whole(blob: PackedFile, problems: list[str] | None) -> bytes | None:
    try:
        with open(blob.real, "rb") as f:
            data = f.read(blob.size + 1)
    except OSError as exc:
        if problems is not None:
            problems.append(f"{blob.path}: {exc.strerror}")
        return None
    if len(data) != blob.size:
        if problems is not None:
            problems.append(f"{blob.path} changed while it was being uploaded")
        return None
    return data


def _chunked(blob: PackedFile, problems: list[str] | None) -> Iterator[blob_service_pb2.UploadBlobsRequest | None]:
    """A large blob's chunks; None (and a problem) when the file cannot be read whole."""
    try:
        f = open(blob.real, "rb")  # noqa: SIM115 (closed by the `with f` below)
    except OSError as exc:
        if problems is not None:
            problems.append(f"{blob.path}: {exc.strerror}")
        yield None
        return
    sent = 0
    first = True
    with f:
        while True:
            data = f.read(CHUNK)
            sent += len(data)
            last = len(data) < CHUNK or sent >= blob.size
            if last and (sent != blob.size or f.read(1)):
                if problems is not None:
                    problems.append(f"{blob.path} changed while it was being uploaded")
                yield None
                return
            yield blob_service_pb2.UploadBlobsRequest(
                digest=blob.sha256, size=blob.size if first else 0, data=data, finish=last
            )
            first = False
            if last:
                return


@dataclass
class _Pipeline:
    """The state of one hash-and-upload pass (see the module docstring)."""

    client: Client
    on_bytes: Callable[[int], None]
    problems: list[str] = field(default_factory=list)
    handled: set[str] = field(default_factory=set)  # digests found present or sent
    digests: dict[str, str] = field(default_factory=dict)  # path -> sha256 of the files hashed here
    sent: list[PackedFile] = field(default_factory=list)  # one file per blob sent
    error: CliError | None = None  # a FindMissingBlobs that failed inside the request stream

    def requests(
        self, cached_missing: Sequence[PackedFile], unhashed: Sequence[PackedFile]
    ) -> Iterator[bytes | blob_service_pb2.UploadBlobsRequest]:
        """The UploadBlobs stream: the cached files the console lacks, then each batch of
        `unhashed` as soon as it is hashed and its digests looked up. The next batch is read and
        hashed on HASH_THREADS threads while this one is sent (reads and sha256 release the GIL)."""
        self.sent.extend(cached_missing)
        yield from blob_chunks(cached_missing, self.on_bytes, self.problems)
        with ThreadPoolExecutor(HASH_THREADS, thread_name_prefix="sf-hash") as pool:
            batches = _batches(unhashed)
            ahead = _start_hashing(pool, next(batches, []))
            while ahead:
                hashed, contents = self._collect(ahead)
                ahead = _start_hashing(pool, next(batches, [])) if not self.problems else []
                if self.problems:
                    break
                try:
                    missing = find_missing(self.client, list(dict.fromkeys(b.sha256 for b in hashed)))
                except CliError as err:
                    self.error = err
                    break
                to_send = []
                for b in hashed:
                    if b.sha256 in missing and b.sha256 not in self.handled:
                        to_send.append(b)
                    self.handled.add(b.sha256)
                self.sent.extend(to_send)
                yield from blob_chunks(to_send, self.on_bytes, self.problems, contents)
                if self.problems:
                    break
            for future in ahead:
                future.cancel()

    def _collect(self, parts: list[Future[_Hashed]]) -> tuple[list[PackedFile], dict[str, bytes]]:
        """A batch's files with their digests, and the content of its small files by digest, from
        the parts hashed on the pool; stops at the first file that could not be read."""
        out: list[PackedFile] = []
        contents: dict[str, bytes] = {}
        for part in parts:
            files, problem = part.result()
            for f, digest, data in files:
                self.digests[f.path] = digest
                out.append(PackedFile(f.path, f.real, digest, f.size, f.executable, f.stat))
                if data is not None:
                    contents[digest] = data
            if problem is not None:
                self.problems.append(problem)
                break
        return out, contents


# Threads that read and hash files ahead of the upload (hash_and_upload): a batch is split into
# this many parts, one per thread.
HASH_THREADS = 2
# One part hashed: (file, digest, its content when small), and the first problem (which ends it).
_Hashed = tuple[list[tuple[PackedFile, str, bytes | None]], str | None]


def _start_hashing(pool: ThreadPoolExecutor, batch: list[PackedFile]) -> list[Future[_Hashed]]:
    if not batch:
        return []
    step = -(-len(batch) // HASH_THREADS)
    return [pool.submit(_hash_part, batch[i : i + step]) for i in range(0, len(batch), step)]


def _hash_part(files: Sequence[PackedFile]) -> _Hashed:
    """Read and hash `files` in order: a small file is read once (its bytes are the ones sent), a
    large one hashed as it is read (and read again when it is sent)."""
    out: list[tuple[PackedFile, str, bytes | None]] = []
    problems: list[str] = []
    for f in files:
        if f.size < CHUNK:
            data = _read_whole(f, problems)
            if data is None:
                return out, problems[0]
            out.append((f, hashlib.sha256(data).hexdigest(), data))
            continue
        try:
            out.append((f, sha256_file(f.real), None))
        except OSError as exc:
            return out, f"{f.path}: {exc.strerror}"
    return out, None


def hash_small_change(pack: Pack) -> None:
    """Hash now the files of `pack` the hash cache did not know when they are few bytes (a file
    just edited, or one written within the cache's racy window): not worth a pipeline, and with
    every digest known an unchanged lab can be named by its manifest digest."""
    unhashed = pack.unhashed
    if not unhashed or sum(f.size for f in unhashed) > PIPELINE_BYTES:
        return
    try:
        digests = {f.path: sha256_file(f.real) for f in unhashed}
    except OSError:
        return  # a file gone since it was packed: the upload names it
    pack.hashed(digests)


def _batches(files: Sequence[PackedFile]) -> Iterator[list[PackedFile]]:
    batch: list[PackedFile] = []
    size = 0
    for f in files:
        batch.append(f)
        size += f.size
        if size >= PIPELINE_BYTES or len(batch) >= PIPELINE_FILES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def hash_and_upload(
    client: Client, pack: Pack, out: Output, on_bytes: Callable[[int], None] = lambda n: None
) -> UploadStats:
    """Hash the files of `pack` the hash cache did not know while uploading what the console
    lacks (see the module docstring); then `pack` has every digest and its manifest. `on_bytes`
    is told the size of each blob (or chunk) as it goes into the stream. A file that changed
    while it was hashed or sent is named in the CliError."""
    unhashed = pack.unhashed
    if not unhashed:
        return upload_files(client, pack.files, out)
    known: dict[str, PackedFile] = {}
    for f in pack.files:
        if f.sha256:
            known.setdefault(f.sha256, f)
    missing = find_missing(client, list(known))
    cached_missing = [known[d] for d in known if d in missing]
    total = sum(f.size for f in unhashed) + sum(b.size for b in cached_missing)
    with _progress(out, total) as advance:

        def done(n: int) -> None:
            advance(n)
            on_bytes(n)

        pipeline = _Pipeline(client, done, handled=set(known))
        _send(client, pipeline.requests(cached_missing, unhashed), pipeline.problems, pipeline.sent)
    if pipeline.error is not None:
        raise pipeline.error
    pack.hashed(pipeline.digests)
    sent = {b.sha256 for b in pipeline.sent}
    files_uploaded = sum(1 for f in pack.files if f.sha256 in sent)
    return UploadStats(files_uploaded, sum(b.size for b in pipeline.sent), len(pack.files) - files_uploaded)


@contextlib.contextmanager
def _progress(out: Output, total: int) -> Iterator[Callable[[int], None]]:
    """A function to report bytes done: a progress bar on a terminal, nothing otherwise."""
    if not out.interactive:
        yield lambda n: None
        return
    from rich.progress import (  # a progress bar only on a terminal: a re-submit never loads rich
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    columns = (TextColumn("uploading"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=out.err, transient=True) as progress:
        task = progress.add_task("upload", total=total)
        yield lambda n: progress.advance(task, n)


def upload_files(client: Client, files: Sequence[PackedFile], out: Output) -> UploadStats:
    """Upload the content of `files` the console lacks; returns counts for the summary line."""
    by_digest: dict[str, PackedFile] = {}
    for f in files:
        by_digest.setdefault(f.sha256, f)
    missing = find_missing(client, list(by_digest))
    to_send = [by_digest[d] for d in by_digest if d in missing]
    total = sum(b.size for b in to_send)
    files_uploaded = sum(1 for f in files if f.sha256 in missing)
    stats = UploadStats(files_uploaded, total, len(files) - files_uploaded)
    if not to_send:
        return stats
    problems: list[str] = []
    with _progress(out, total) as advance:
        _send(client, blob_chunks(to_send, advance, problems), problems, to_send)
    return stats


def _send(
    client: Client,
    requests: Iterator[bytes | blob_service_pb2.UploadBlobsRequest],
    problems: list[str],
    blobs: Sequence[PackedFile],
) -> None:
    try:
        client.client_stream(client.blob_upload, requests)
    except CliError as err:
        if problems:
            raise CliError(f"upload failed: {problems[0]}; run the command again") from None
        changed = _changed_file(str(err), blobs)
        if changed is not None:
            raise CliError(
                f"upload failed: {changed} changed while it was being uploaded; run the command again"
            ) from None
        raise
    if problems:
        raise CliError(f"upload failed: {problems[0]}; run the command again")
