"""Content-addressed blob store on a filesystem: `<root>/<d[:2]>/<d>` for sha256 digest d (a loose
blob), or inside a pack of `<root>/packs/` (control/blobpacks.py) for small blobs uploaded many at
a time.

Writes go to a temporary file that is hashed while written and renamed into place only when the
content matches its digest, so a reader never sees a partial or wrong blob, and a crash leaves at
most a temporary file (removed at start). A pack is published by its index, after its content is
durable, under the same rule.

Packs need every process that reads the folder to know them, so a store packs only where the
`packs` folder exists: a new store makes it; a store written by an earlier release (loose blobs,
no `packs`) stays loose until an operator creates the folder once no replica of that release
reads it (docs/deploy.md, upgrades).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import pathlib
import stat
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

from common import errors
from common.hashing import MAX_BLOB_BYTES, is_digest
from control.blobpacks import FOLDER as PACKS_FOLDER
from control.blobpacks import PACK_MAX_BLOB, PACK_MIN_BLOBS, PackIndex, write_file

READ_CHUNK = 1 << 20
# A temporary file older than this is a leftover of a crash (an upload in progress writes to its file
# at least every few seconds, and no single blob write takes an hour).
STALE_TMP_SECONDS = 3600
_LIBC = ctypes.CDLL(None, use_errno=True)


def sync_filesystem(fd: int) -> None:
    """Make everything written to the file system holding `fd` durable: syncfs(2) where the C
    library has it (one barrier for a whole batch of files), else sync(2)."""
    syncfs = getattr(_LIBC, "syncfs", None)
    if syncfs is None:
        os.sync()
        return
    if syncfs(fd) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"syncfs: {os.strerror(err)}")


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
        self._shards: set[str] = set()  # the `<d[:2]>` folders known to exist
        new_store = not root.exists() or not any(e.name not in ("tmp", PACKS_FOLDER) for e in os.scandir(root))
        (root / "tmp").mkdir(parents=True, exist_ok=True)
        if new_store:
            (root / PACKS_FOLDER).mkdir(exist_ok=True)
        self.packs = PackIndex(os.fspath(root))
        self.packs.sweep()
        self.packs.refresh()
        # Temporary files of writes a crash interrupted. Only old ones: control-plane replicas share
        # this directory, and a fresh file may be another replica's write in progress.
        stale_before = time.time() - STALE_TMP_SECONDS
        for leftover in (root / "tmp").iterdir():
            with contextlib.suppress(FileNotFoundError):
                if leftover.stat().st_mtime < stale_before:
                    leftover.unlink()

    def path(self, digest: str) -> pathlib.Path:
        """Where the loose blob `digest` is or would be (a packed one is in a pack: `packs.find`)."""
        if not is_digest(digest):
            raise errors.InvalidArgument(f"not a sha256 digest: {digest[:80]!r}")
        return self.root / digest[:2] / digest

    def has(self, digest: str) -> bool:
        return self.sizes([digest])[digest] is not None

    def sizes(self, digests: list[str]) -> dict[str, int | None]:
        """Each digest's blob size, None when it is not stored: the pack index, else one stat, on
        plain strings (a workspace of 10,000 files is asked about on every submission; pathlib's
        objects were most of that work). The packs folder is read again once for the digests
        found nowhere (another replica may have just packed them)."""
        out = self._sizes(digests)
        if None in out.values():
            self.packs.refresh()
            out.update(self._sizes([d for d, size in out.items() if size is None]))
        return out

    def _sizes(self, digests: list[str]) -> dict[str, int | None]:
        root = os.fspath(self.root)
        out: dict[str, int | None] = {}
        find = self.packs.find
        for d in digests:
            if not is_digest(d):
                raise errors.InvalidArgument(f"not a sha256 digest: {d[:80]!r}")
            packed = find(d)
            if packed is not None:
                out[d] = packed.size
                continue
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
        size = self.sizes([digest])[digest]
        if size is None:
            raise errors.NotFound(f"blob {digest} not found")
        return size

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

    def put_many(self, blobs: Sequence[tuple[str, bytes]]) -> list[bool]:
        """Store whole blobs (digest, content) behind one durability barrier; per blob, whether it
        was new.

        Every blob is verified first: one bad blob fails the batch and nothing of it is published.
        Then the new ones are written: as one pack (control/blobpacks.py) where the store packs and
        at least PACK_MIN_BLOBS of them are small, otherwise as loose files (`_put_loose`). Plain
        strings and `os` calls per blob: a batch is up to 2,048 small blobs, and pathlib's objects
        cost more than the writes (profile of bench `packaging`).
        """
        for digest, data in blobs:
            if not is_digest(digest):
                raise errors.InvalidArgument(f"not a sha256 digest: {digest[:80]!r}")
            self._check_size(digest, len(data))
            actual = hashlib.sha256(data).hexdigest()
            if actual != digest:
                raise errors.InvalidArgument(
                    f"blob content does not match its digest: declared {digest}, content hashes to {actual}"
                )
        present = self.sizes(list({d for d, _ in blobs}))
        new: list[bool] = []
        fresh: dict[str, bytes] = {}
        for digest, data in blobs:
            is_new = present[digest] is None and digest not in fresh
            if is_new:
                fresh[digest] = data
            new.append(is_new)
        small = [(d, data) for d, data in fresh.items() if len(data) <= PACK_MAX_BLOB]
        if len(small) >= PACK_MIN_BLOBS and self.packs.enabled:
            self.packs.write(small)
            self._put_loose([(d, data) for d, data in fresh.items() if len(data) > PACK_MAX_BLOB])
        else:
            self._put_loose(list(fresh.items()))
        for is_new, (_, data) in zip(new, blobs, strict=True):
            self._count(is_new, len(data))
        return new

    def _put_loose(self, blobs: list[tuple[str, bytes]]) -> None:
        """Write verified blobs as loose files behind one durability barrier: each to a temporary
        file without its own fsync; then one syncfs makes all the contents durable, the files are
        renamed into place, and a second syncfs makes the names durable. A crash at any point
        leaves temporary files (removed at start) or whole blobs, never a published name over
        content that did not reach the disk."""
        root = os.fspath(self.root)
        tag = f"{os.getpid()}.{threading.get_ident()}.batch"
        staged: list[tuple[str, str]] = []
        try:
            for digest, data in blobs:
                tmp = f"{root}/tmp/{digest}.{tag}"
                write_file(tmp, data)  # no fsync: the batch's syncfs makes it durable
                staged.append((tmp, f"{root}/{digest[:2]}/{digest}"))
            if staged:
                self._publish(staged)
        except BaseException:
            for tmp, _ in staged:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
            raise

    def _publish(self, staged: list[tuple[str, str]]) -> None:
        fd = os.open(self.root / "tmp", os.O_RDONLY | os.O_DIRECTORY)
        try:
            sync_filesystem(fd)  # contents first ...
            for tmp, target in staged:
                self._shard_dir(target)
                try:
                    os.replace(tmp, target)
                except FileNotFoundError:  # its folder removed since (by hand): make it again
                    self._shards.discard(target[: target.rfind("/")])
                    self._shard_dir(target)
                    os.replace(tmp, target)
            sync_filesystem(fd)  # ... then the names
        finally:
            os.close(fd)

    def _shard_dir(self, target: str) -> None:
        """Make the `<d[:2]>` folder of `target` once per store (at most 256 of them)."""
        shard = target[: target.rfind("/")]
        if shard not in self._shards:
            os.makedirs(shard, exist_ok=True)
            self._shards.add(shard)

    def _check_size(self, digest: str, size: int) -> None:
        if size < 0 or size > self.max_blob_bytes:
            raise errors.InvalidArgument(
                f"blob {digest[:12]} has size {size}; the limit is {self.max_blob_bytes} bytes"
            )

    def writer(self, digest: str, size: int) -> BlobWriter:
        target = self.path(digest)
        self._check_size(digest, size)
        return BlobWriter(self, digest, size, target)

    def read(self, digest: str, offset: int = 0) -> Iterator[bytes]:
        f, start, size = self._open(digest)
        if f is None:
            raise errors.NotFound(f"blob {digest} not found")
        with f:
            f.seek(start + min(max(offset, 0), size))
            left = max(size - offset, 0)
            while left and (chunk := f.read(min(READ_CHUNK, left))):
                left -= len(chunk)
                yield chunk

    def _open(self, digest: str) -> tuple[BinaryIO | None, int, int]:
        """The file holding `digest`, where its bytes start there and how many (None: not stored)."""
        path = self.path(digest)
        for attempt in range(2):
            packed = self.packs.find(digest)
            if packed is not None:
                return open(packed.path, "rb"), packed.offset, packed.size
            try:
                f = path.open("rb")
            except FileNotFoundError:
                if attempt == 0:
                    self.packs.refresh()
                continue
            return f, 0, os.fstat(f.fileno()).st_size
        return None, 0, 0

    def read_bytes(self, digest: str) -> bytes:
        return b"".join(self.read(digest))

    def read_prefix(self, digest: str, limit: int) -> bytes:
        """At most the first `limit` bytes of a blob (b"" when it is absent): checks that look at a
        file's start never hold a whole blob in memory, however large the blob is."""
        f, start, size = self._open(digest)
        if f is None:
            return b""
        with f:
            f.seek(start)
            return f.read(min(limit, size))

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
        self.present = store.has(digest)
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
