"""Content-addressed blob store on a filesystem: `<root>/<d[:2]>/<d>` for sha256 digest d.

Writes go to a temporary file that is hashed while written and renamed into place only when the
content matches its digest, so a reader never sees a partial or wrong blob, and a crash leaves at
most a temporary file (removed at start).
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from common import errors
from common.hashing import MAX_BLOB_BYTES, is_digest

READ_CHUNK = 1 << 20


@dataclass
class UploadStats:
    """Counters since start: what clients uploaded (tests check that unchanged labs upload nothing)."""

    blobs_written: int = 0
    bytes_written: int = 0
    blobs_already_present: int = 0


class BlobStore:
    def __init__(self, root: pathlib.Path, max_blob_bytes: int = MAX_BLOB_BYTES) -> None:
        self.root = root
        self.max_blob_bytes = max_blob_bytes
        self.stats = UploadStats()
        self._lock = threading.Lock()
        (root / "tmp").mkdir(parents=True, exist_ok=True)
        for leftover in (root / "tmp").iterdir():
            leftover.unlink(missing_ok=True)

    def path(self, digest: str) -> pathlib.Path:
        if not is_digest(digest):
            raise errors.InvalidArgument(f"not a sha256 digest: {digest[:80]!r}")
        return self.root / digest[:2] / digest

    def has(self, digest: str) -> bool:
        return self.path(digest).is_file()

    def sizes(self, digests: list[str]) -> dict[str, int | None]:
        """Each digest's blob size, None when it is not stored: one stat per digest, on plain
        strings (a workspace of 10,000 files is asked about on every submission; pathlib's
        objects were most of that work)."""
        root = os.fspath(self.root)
        out: dict[str, int | None] = {}
        for d in digests:
            if not is_digest(d):
                raise errors.InvalidArgument(f"not a sha256 digest: {d[:80]!r}")
            try:
                st = os.stat(f"{root}/{d[:2]}/{d}")
            except (FileNotFoundError, NotADirectoryError):
                out[d] = None
                continue
            out[d] = st.st_size if stat.S_ISREG(st.st_mode) else None
        return out

    def missing(self, digests: list[str]) -> list[str]:
        sizes = self.sizes(digests)
        return [d for d in digests if sizes[d] is None]

    def size(self, digest: str) -> int:
        try:
            return self.path(digest).stat().st_size
        except FileNotFoundError:
            raise errors.NotFound(f"blob {digest} not found") from None

    def put_bytes(self, data: bytes) -> str:
        """Store `data`; return its digest (used for capsule.json and small server-made blobs)."""
        digest = hashlib.sha256(data).hexdigest()
        writer = self.writer(digest, len(data))
        writer.write(data)
        writer.finish()
        return digest

    def put_file(self, source: pathlib.Path) -> str:
        """Store a local file's content; return its digest."""
        h = hashlib.sha256()
        with source.open("rb") as f:
            while chunk := f.read(READ_CHUNK):
                h.update(chunk)
        digest = h.hexdigest()
        if not self.has(digest):
            writer = self.writer(digest, source.stat().st_size)
            with source.open("rb") as f:
                while chunk := f.read(READ_CHUNK):
                    writer.write(chunk)
            writer.finish()
        return digest

    def writer(self, digest: str, size: int) -> BlobWriter:
        target = self.path(digest)
        if size < 0 or size > self.max_blob_bytes:
            raise errors.InvalidArgument(
                f"blob {digest[:12]} has size {size}; the limit is {self.max_blob_bytes} bytes"
            )
        return BlobWriter(self, digest, size, target)

    def read(self, digest: str, offset: int = 0) -> Iterator[bytes]:
        path = self.path(digest)
        try:
            f = path.open("rb")
        except FileNotFoundError:
            raise errors.NotFound(f"blob {digest} not found") from None
        with f:
            f.seek(offset)
            while chunk := f.read(READ_CHUNK):
                yield chunk

    def read_bytes(self, digest: str) -> bytes:
        return b"".join(self.read(digest))

    def read_prefix(self, digest: str, limit: int) -> bytes:
        """At most the first `limit` bytes of a blob (b"" when it is absent): checks that look at a
        file's start never hold a whole blob in memory, however large the blob is."""
        try:
            with self.path(digest).open("rb") as f:
                return f.read(limit)
        except FileNotFoundError:
            return b""

    def _count(self, written: bool, nbytes: int) -> None:
        with self._lock:
            if written:
                self.stats.blobs_written += 1
                self.stats.bytes_written += nbytes
            else:
                self.stats.blobs_already_present += 1


class BlobWriter:
    """Receives one blob's chunks in order; `finish` verifies and publishes it."""

    def __init__(self, store: BlobStore, digest: str, size: int, target: pathlib.Path) -> None:
        self.store = store
        self.digest = digest
        self.size = size
        self.target = target
        self.received = 0
        self._hash = hashlib.sha256()
        self.present = target.is_file()
        self._tmp: pathlib.Path | None = None
        self._file = None
        if not self.present:
            fd_path = store.root / "tmp" / f"{digest}.{os.getpid()}.{threading.get_ident()}.{id(self)}"
            self._tmp = fd_path
            self._file = fd_path.open("wb")

    def write(self, data: bytes) -> None:
        self.received += len(data)
        if self.received > self.size:
            self.abort()
            raise errors.InvalidArgument(f"blob {self.digest[:12]}: received more than the declared {self.size} bytes")
        self._hash.update(data)
        if self._file is not None:
            self._file.write(data)

    def finish(self) -> bool:
        """Verify and publish; returns True when new content was written."""
        if self.received != self.size:
            self.abort()
            raise errors.InvalidArgument(
                f"blob {self.digest[:12]}: received {self.received} bytes, declared {self.size}"
            )
        actual = self._hash.hexdigest()
        if actual != self.digest:
            self.abort()
            raise errors.InvalidArgument(
                f"blob content does not match its digest: declared {self.digest}, content hashes to {actual}"
            )
        if self._file is None or self._tmp is None:
            self.store._count(False, 0)
            return False
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        self.target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(self._tmp, self.target)
        self.store._count(True, self.size)
        return True

    def abort(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)
            self._tmp = None
