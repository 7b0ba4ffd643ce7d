"""Pack files of the blob store: many small blobs in one file, found through an index.

A batch of small blobs (`BlobStore.put_many` with at least PACK_MIN_BLOBS new ones) is written as
one `<root>/packs/<name>.pack`, their contents one after another, and one `<name>.idx`, each blob's
digest, offset and size, instead of a file per blob: creating files is what storing thousands of
small blobs costs on a busy disk (bench/packaging.py).

Publishing: the pack is written and fsynced first; the index is written under `<root>/tmp`,
fsynced, renamed into `packs/`, and the folder fsynced. A blob is readable once its index is in
`packs/`, and a crash leaves at most a pack without an index (removed at start once it is older
than an hour: another replica may still be writing it) or a temporary index (the store's sweep).
Packs, like loose blobs, are never rewritten nor deleted, so a copy of the folder is a backup.

Reading: every process keeps the indexes in memory (about 150 bytes per packed blob) and reads
the folder again when it is asked about a digest it does not know and the folder changed since it
last read it (or that reading came within RESCAN_MARGIN_NS of the folder's last change, which a
file system with coarse times could hide), so a blob another replica has just packed is found at
once.

Index file: MAGIC, then per blob `<32s Q I` (raw sha256, offset, size), little-endian.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import struct
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

log = logging.getLogger(__name__)

FOLDER = "packs"
MAGIC = b"SFPACK1\n"
ENTRY = struct.Struct("<32sQI")
# A batch packs only when it stores at least this many new blobs (a few files are cheap to create,
# and a pack per one-file change would double the files instead), each at most PACK_MAX_BLOB bytes
# (a large blob costs its bytes, not its inode).
PACK_MIN_BLOBS = 32
PACK_MAX_BLOB = 1 << 20
RESCAN_MARGIN_NS = 2_000_000_000
STALE_PACK_SECONDS = 3600
# Where a packed blob is, in one int: pack number, offset in the pack, size.
_OFFSET_SHIFT, _PACK_SHIFT = 32, 80


@dataclass(frozen=True)
class Location:
    """A packed blob: its pack file and its bytes there."""

    path: str
    offset: int
    size: int


class PackIndex:
    """The packs of one store folder, in memory (module docstring)."""

    def __init__(self, root: str) -> None:
        self.folder = f"{root}/{FOLDER}"
        self.tmp = f"{root}/tmp"
        self._names: list[str] = []  # pack number -> pack name
        self._loaded: set[str] = set()
        self._where: dict[bytes, int] = {}
        self._seen_mtime_ns: int | None = None
        self._listed_at_ns = 0
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        """Whether new batches are packed: the folder exists (BlobStore decides when to make it)."""
        return os.path.isdir(self.folder)

    def __len__(self) -> int:
        return len(self._where)

    def find(self, digest: str) -> Location | None:
        """Where `digest` is packed, from what this process has read so far (see `refresh`)."""
        at = self._where.get(bytes.fromhex(digest))
        if at is None:
            return None
        size = at & 0xFFFFFFFF
        offset = (at >> _OFFSET_SHIFT) & ((1 << (_PACK_SHIFT - _OFFSET_SHIFT)) - 1)
        return Location(f"{self.folder}/{self._names[at >> _PACK_SHIFT]}.pack", offset, size)

    def refresh(self) -> None:
        """Read the indexes other writers published since the last call, if the folder changed."""
        try:
            mtime_ns = os.stat(self.folder).st_mtime_ns
        except FileNotFoundError:
            return
        with self._lock:
            # Unchanged since a listing made well after its last change: nothing new. A listing
            # made within the margin of it may have missed an index renamed in the same tick of a
            # coarse clock, so that case lists again.
            if mtime_ns == self._seen_mtime_ns and self._listed_at_ns - mtime_ns >= RESCAN_MARGIN_NS:
                return
            self._seen_mtime_ns, self._listed_at_ns = mtime_ns, time.time_ns()
            for entry in os.listdir(self.folder):
                if entry.endswith(".idx") and entry[:-4] not in self._loaded:
                    self._load(entry[:-4])

    def sweep(self) -> None:
        """Remove packs a crash left without an index, once they are old enough not to be a write
        in progress (another replica's)."""
        try:
            entries = set(os.listdir(self.folder))
        except FileNotFoundError:
            return
        stale_before = time.time() - STALE_PACK_SECONDS
        for entry in entries:
            if entry.endswith(".pack") and entry[:-5] + ".idx" not in entries:
                path = f"{self.folder}/{entry}"
                try:
                    if os.stat(path).st_mtime < stale_before:
                        os.unlink(path)
                except FileNotFoundError:
                    continue

    def write(self, blobs: Sequence[tuple[str, bytes]]) -> None:
        """Publish verified blobs (digest, content) as one pack (module docstring for the order)."""
        name = f"{time.time_ns():016x}-{os.getpid()}-{secrets.token_hex(4)}"
        pack, index = f"{self.folder}/{name}.pack", f"{self.tmp}/{name}.idx"
        entries: list[tuple[bytes, int, int]] = []
        offset = 0
        for digest, data in blobs:
            entries.append((bytes.fromhex(digest), offset, len(data)))
            offset += len(data)
        try:
            write_file(pack, b"".join(data for _, data in blobs), exclusive=True, sync=True)
            write_file(index, MAGIC + b"".join(ENTRY.pack(*e) for e in entries), exclusive=True, sync=True)
            os.rename(index, f"{self.folder}/{name}.idx")
        except BaseException:
            for leftover in (pack, index):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(leftover)
            raise
        _sync_folder(self.folder)
        with self._lock:
            self._add(name, entries)

    def _load(self, name: str) -> None:
        try:
            with open(f"{self.folder}/{name}.idx", "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return
        body = data[len(MAGIC) :]
        if not data.startswith(MAGIC) or len(body) % ENTRY.size:
            log.error("blob pack index %s/%s.idx is not a pack index; its blobs are not served", self.folder, name)
            self._loaded.add(name)
            return
        self._add(name, ENTRY.iter_unpack(body))

    def _add(self, name: str, entries: Iterable[tuple[bytes, int, int]]) -> None:
        number = len(self._names)
        self._names.append(name)
        self._loaded.add(name)
        base = number << _PACK_SHIFT
        for raw, offset, size in entries:
            self._where[raw] = base | (offset << _OFFSET_SHIFT) | size


def write_file(path: str, data: bytes, *, exclusive: bool = False, sync: bool = False) -> None:
    """Write `data` to the file `path`, created (`exclusive`: it must not exist, else truncated);
    fsynced when `sync` (otherwise the caller's barrier makes it durable)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_EXCL if exclusive else os.O_TRUNC)
    fd = os.open(path, flags, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _sync_folder(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
