"""Upload a packed workspace's content to the console's BlobService.

Blobs are named by their sha256, so only content the console lacks is sent: FindMissingBlobs in
batches of at most 10,000 digests, then one UploadBlobs stream: files under 1 MiB whole, several
per message; larger ones in 1 MiB chunks (the first chunk of a blob carries its size, the last one
`finish`). An unchanged lab therefore uploads 0 bytes.
A progress bar (bytes, speed) is shown only when a person watches stderr.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from starforge_api.control.v1 import blob_service_pb2

from cli.client import Client
from cli.errors import CliError
from cli.output import Output, human_bytes
from cli.pack import PackedFile

CHUNK = 1 << 20
# Whole small files per UploadBlobs message: under the console's 4 MiB message limit.
MESSAGE_BYTES = 2 << 20
FIND_BATCH = 10_000


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
) -> Iterator[blob_service_pb2.UploadBlobsRequest]:
    """The UploadBlobs request stream for `blobs` (one PackedFile per distinct digest).

    Files under CHUNK bytes travel whole, several per message (up to MESSAGE_BYTES); larger ones
    as chunks. Content is not hashed again here: the console verifies every blob against its
    digest, and a file whose size changed since it was hashed ends the stream early and is
    reported in `problems` (raising here would make grpc log a traceback from its sending thread).
    """
    batch = blob_service_pb2.UploadBlobsRequest()
    batch_bytes = 0
    for blob in blobs:
        if blob.size < CHUNK:
            data = _read_whole(blob, problems)
            if data is None:
                return
            if batch_bytes + len(data) > MESSAGE_BYTES and batch_bytes:
                yield batch
                batch, batch_bytes = blob_service_pb2.UploadBlobsRequest(), 0
            batch.blobs.add(digest=blob.sha256, data=data)
            batch_bytes += len(data)
            on_bytes(len(data))
            continue
        if batch_bytes or len(batch.blobs):
            yield batch
            batch, batch_bytes = blob_service_pb2.UploadBlobsRequest(), 0
        for chunk in _chunked(blob, problems):
            if chunk is None:
                return
            yield chunk
            on_bytes(len(chunk.data))
    if len(batch.blobs):
        yield batch


def _read_whole(blob: PackedFile, problems: list[str] | None) -> bytes | None:
    try:
        with blob.real.open("rb") as f:
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
        f = blob.real.open("rb")
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
    if out.interactive:
        from rich.progress import (  # a progress bar only on a terminal: a re-submit never loads rich
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        columns = (
            TextColumn("uploading"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
        )
        with Progress(*columns, console=out.err, transient=True) as progress:
            task = progress.add_task("upload", total=total)
            requests = blob_chunks(to_send, lambda n: progress.advance(task, n), problems)
            _send(client, requests, problems, to_send)
    else:
        _send(client, blob_chunks(to_send, problems=problems), problems, to_send)
    return stats


def _send(
    client: Client,
    requests: Iterator[blob_service_pb2.UploadBlobsRequest],
    problems: list[str],
    blobs: Sequence[PackedFile],
) -> None:
    try:
        client.client_stream(client.blobs.UploadBlobs, requests)
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
