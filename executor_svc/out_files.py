"""Reading a job's FORGE_OUT_DIR without trusting it: listing and streaming its files.

The job's own code writes FORGE_OUT_DIR, so every name, link and file type in it is chosen by
the job. It may hold links to /etc, to the attempt's run token, to another job's out dir or to
the executor's state, FIFOs that block a reader, or millions of entries. The rules:

- A request path is relative, "/"-separated, without empty, "." or ".." parts, at most
  `MAX_PATH_BYTES`; anything else is InvalidArgument before the disk is touched.
- Every step is taken from the directory before it by file descriptor with O_NOFOLLOW
  (`os.open(part, dir_fd=...)`): a link anywhere on the way, or in place of the out dir itself,
  is never followed, and a rename under way cannot move the walk outside (no check-then-open).
- A file is opened O_PATH first (no device or FIFO is ever opened for reading) and served only
  when `fstat` of that descriptor says regular file.
- Listings show regular files (size, sha256) and links (their target text), sorted by path, a
  page at a time; walks stop at `MAX_ENTRIES` entries and `MAX_DEPTH` levels.

Standard library only: the local kind, forgelet and the Slurm kind share it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import errno
import hashlib
import os
import stat
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

from common import errors
from common.artifact_paths import MAX_DEPTH, split_path

MAX_ENTRIES = 100_000
MAX_LINK_TARGET = 4096
DEFAULT_PAGE = 200
MAX_PAGE = 1000
CHUNK_BYTES = 1024 * 1024
PAGE_TEXT_BYTES = 2 * 1024 * 1024

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class Entry:
    """One listed entry: a regular file (`link_target` None) or a link."""

    path: str
    size: int
    mtime: dt.datetime
    sha256: str = ""
    link_target: str | None = None


@dataclass(frozen=True)
class Page:
    entries: list[Entry]
    next_page_token: str


def _open_root(root: Path) -> int:
    try:
        return os.open(root, _DIR_FLAGS)
    except FileNotFoundError:
        raise errors.NotFound("the job has no out dir on this executor (it never ran here)") from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise errors.FailedPrecondition("the job's out dir is not a directory") from None
        raise


def open_file(root: Path, path: str) -> int:
    """A read-only descriptor of the regular file `path` under `root`, no link followed.

    NotFound when it does not exist, FailedPrecondition when it (or a directory on the way) is a
    link, or it is not a regular file. The last part is first opened O_PATH (which opens no
    device and no FIFO), checked with fstat, and only then reopened for reading through
    /proc/self/fd: the same inode, so nothing can be swapped in between. The caller closes it.
    """
    parts = split_path(path)
    fd = _open_root(root)
    try:
        for i, part in enumerate(parts[:-1]):
            nxt = _step(fd, part, _DIR_FLAGS, "/".join(parts[: i + 1]), path)
            os.close(fd)
            fd = nxt
        handle = _step(fd, parts[-1], _PATH_FLAGS, path, path)
        os.close(fd)
        fd = handle
        mode = os.fstat(fd).st_mode
        if stat.S_ISLNK(mode):
            raise errors.FailedPrecondition(f"{path!r} in the job's out dir is a link (links are never followed)")
        if not stat.S_ISREG(mode):
            raise errors.FailedPrecondition(f"{path!r} in the job's out dir is not a regular file")
        readable = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
        os.close(fd)
        return readable
    except BaseException:
        os.close(fd)
        raise


def _step(fd: int, part: str, flags: int, where: str, path: str) -> int:
    try:
        return os.open(part, flags, dir_fd=fd)
    except FileNotFoundError:
        raise errors.NotFound(f"{path!r} is not in the job's out dir") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise errors.FailedPrecondition(
                f"{where!r} in the job's out dir is a link (links are never followed)"
            ) from None
        if exc.errno == errno.ENOTDIR:
            raise errors.FailedPrecondition(f"{where!r} in the job's out dir is not a directory") from None
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise errors.FailedPrecondition(f"{where!r} in the job's out dir cannot be read") from None
        raise


def read_chunks(fd: int, offset: int, chunk: int = CHUNK_BYTES) -> Iterator[tuple[int, bytes, int]]:
    """(offset, data, size at open) from `offset` to the end of the open file `fd` (not closed
    here). An offset beyond the size is InvalidArgument; an offset equal to it yields one empty
    chunk, so that a caller always learns the size."""
    size = os.fstat(fd).st_size
    if offset < 0 or offset > size:
        raise errors.InvalidArgument(
            f"offset {offset} is outside the file (size {size}); delete the partial download and start again",
            field_violations=(errors.FieldViolation("offset", "beyond the file's size"),),
        )
    if offset == size:
        yield offset, b"", size
        return
    while offset < size:
        data = os.pread(fd, min(chunk, size - offset), offset)
        if not data:
            return  # truncated meanwhile: the client's sha256 check tells it
        yield offset, data, size
        offset += len(data)


def _mtime(st: os.stat_result) -> dt.datetime:
    return dt.datetime.fromtimestamp(st.st_mtime_ns / 1e9, dt.UTC)


@dataclass(frozen=True)
class _Found:
    path: str
    st: os.stat_result
    link_target: str | None


def _walk(root: Path) -> list[_Found]:
    """Every regular file and link under `root`, sorted by path; directories entered by fd.
    Every name seen (directories and skipped files too) counts towards `MAX_ENTRIES`."""
    found: list[_Found] = []
    fd = _open_root(root)
    _walk_dir(fd, "", 0, found, [0])
    found.sort(key=lambda f: f.path)
    return found


def _too_many() -> errors.FailedPrecondition:
    return errors.FailedPrecondition(
        f"the job's out dir holds more than {MAX_ENTRIES} entries; only smaller out dirs are listed"
    )


def _names(fd: int, seen: list[int]) -> list[str]:
    names: list[str] = []
    with os.scandir(fd) as it:
        for e in it:
            seen[0] += 1
            if seen[0] > MAX_ENTRIES:
                raise _too_many()
            names.append(e.name)
    return sorted(names)


def _walk_dir(fd: int, prefix: str, depth: int, found: list[_Found], seen: list[int]) -> None:
    try:
        for name in _names(fd, seen):
            if not _utf8(name):
                continue  # cannot travel in a proto string; never listed, never served
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed meanwhile
            path = f"{prefix}{name}"
            if stat.S_ISREG(st.st_mode):
                found.append(_Found(path, st, None))
            elif stat.S_ISLNK(st.st_mode):
                target = os.readlink(name, dir_fd=fd)[:MAX_LINK_TARGET]
                found.append(_Found(path, st, target))
            elif stat.S_ISDIR(st.st_mode) and depth + 1 < MAX_DEPTH:
                try:
                    sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    continue  # replaced by a link or removed meanwhile: not followed
                _walk_dir(sub, f"{path}/", depth + 1, found, seen)
    finally:
        os.close(fd)


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class Lister:
    """Lists out dirs; remembers sha256 per (device, inode, size, mtime, ctime) so that a large
    checkpoint is hashed once, not at every listing (ctime cannot be set back by the job)."""

    def __init__(self, cache_size: int = 4096) -> None:
        self._cache: dict[tuple[int, ...], str] = {}
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def page(self, root: Path, page_size: int, page_token: str) -> Page:
        """One page of `root`'s entries after `page_token` (the last path of the previous page)."""
        size = _page_size(page_size)
        if page_token:
            split_path(page_token, "page_token")
        found = [f for f in _walk(root) if f.path > page_token]
        chosen = _within_budget(found[:size])
        entries = [self._entry(root, f) for f in chosen]
        more = len(found) > len(chosen)
        return Page(entries, chosen[-1].path if more and chosen else "")

    def _entry(self, root: Path, f: _Found) -> Entry:
        if f.link_target is not None:
            return Entry(f.path, 0, _mtime(f.st), link_target=f.link_target)
        try:
            fd = open_file(root, f.path)
        except (errors.NotFound, errors.FailedPrecondition):
            return Entry(f.path, f.st.st_size, _mtime(f.st))  # changed meanwhile: no digest
        try:
            st = os.fstat(fd)
            return Entry(f.path, st.st_size, _mtime(st), sha256=self._sha256(fd, st))
        finally:
            os.close(fd)

    def _sha256(self, fd: int, st: os.stat_result) -> str:
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        with self._lock:
            known = self._cache.get(key)
        if known is not None:
            return known
        h = hashlib.sha256()
        for _, data, _ in read_chunks(fd, 0):
            h.update(data)
        digest = h.hexdigest()
        with self._lock:
            if len(self._cache) >= self._cache_size:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = digest
        return digest


def _within_budget(found: list[_Found]) -> list[_Found]:
    """The leading entries whose names and link targets fit `PAGE_TEXT_BYTES` (at least one), so
    that a page of long paths stays far below gRPC's 4 MiB message limit on every hop."""
    used = 0
    for i, f in enumerate(found):
        used += len(f.path) + len(f.link_target or "") + 200  # + digest, size, time, framing
        if used > PAGE_TEXT_BYTES and i > 0:
            return found[:i]
    return found


def _page_size(page_size: int) -> int:
    if page_size < 0 or page_size > MAX_PAGE:
        raise errors.InvalidArgument(
            f"page_size must be between 1 and {MAX_PAGE} (0 for {DEFAULT_PAGE})",
            field_violations=(errors.FieldViolation("page_size", "out of range"),),
        )
    return page_size or DEFAULT_PAGE


async def stream_file(root: Path, path: str, offset: int) -> AsyncIterator[tuple[int, bytes, int]]:
    """`read_chunks` of `open_file(root, path)`, the disk work in worker threads."""
    fd = await asyncio.to_thread(open_file, root, path)
    try:
        chunks = read_chunks(fd, offset)
        while True:
            item = await asyncio.to_thread(next, chunks, None)
            if item is None:
                return
            yield item
    finally:
        os.close(fd)
