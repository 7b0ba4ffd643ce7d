"""Materialise an attempt's files (capsule, workspace, datasets) from the control plane's blobs.

Blobs are fetched from BlobService (`ReadBlob`, with the attempt's run token) into a node-wide,
content-addressed cache `<cache>/<d[:2]>/<d>`: each download is hashed while written to a
temporary file and renamed into place only when it matches its digest, so the cache never holds a
partial or wrong blob, and an unchanged lab downloads nothing on the second attempt.

Nothing a job can write is shared with another job:

- cache entries are read-only (0444, executables 0555) and owned by the executor; the cache
  directory is 0700;
- capsule and dataset files are hard links into the cache only when the caller says the job can
  never write them (`share_cache=True`: a read-only bind mount, or a job uid that is neither root
  nor the cache's owner); otherwise they are private read-only copies;
- workspace files are always writable copies: the workspace is the job's working directory and
  training code may edit files there in place.

Every cache entry an attempt uses is hashed again before it is placed (an in-memory memo keyed by
inode, size and mtime skips entries verified since their last write; not ctime, which every hard
link and unlink of an entry moves). Only root or the executor's own user can write an entry, and
either could change the executor itself, so the check is for changes from outside (a disk, a
person, a job of an unisolated runtime writing through a link), which move mtime. An entry whose
content changed is evicted and the launch is refused with a FailedPrecondition naming the file: a
tampered cache is a security event, not something to run.
`verify_file` lets the executor check bootstrap.sh once more right before it runs it.

Hard links share their inode, so a file's mode belongs to its cache entry: executable files link a
second entry `<d>.x` (0555) and all others the plain one (0444); a later attempt never changes the
mode of a file an earlier one is running.

An attempt's own capsule.json (the one its `capsule_digest` names: it holds the attempt's id, so no
other attempt ever uses it) is fetched straight into the attempt's capsule directory, hashed while
written and renamed into place read-only (0444), and never enters the cache: cached, it would stay
on the node after its attempt, one file per attempt, forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
import re
import secrets
import shutil
import stat
from collections.abc import AsyncIterator, Awaitable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import grpc
from starforge_api.control.v1 import blob_service_pb2 as blob_pb
from starforge_api.control.v1 import blob_service_pb2_grpc as blob_grpc
from starforge_api.control.v1 import error_reason_pb2 as reason_pb
from starforge_api.executor.v1 import launch_request_pb2 as lr_pb
from starforge_api.job.v1 import workspace_pb2 as ws_pb

from common import errors
from common.channel import aio_channel, bearer
from common.hashing import is_digest
from common.rpc_status import from_rpc_error
from common.tls import ca_credentials
from executor_svc.plumbing.blob_channels import BlobChannels
from executor_svc.plumbing.paths import check_relative_path

FETCH_CONCURRENCY = 8
# Per-blob deadline: a fixed allowance plus the time the blob takes at a slow 10 MiB/s.
DEADLINE_BASE_SECONDS = 60.0
DEADLINE_BYTES_PER_SECOND = 10 * 1024 * 1024
DATASET_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class _Entry:
    """One file to place: where it goes and where it came from in the request (for messages)."""

    root: Path
    label: str  # "capsule/bootstrap.sh", "workspace/train.sh", "datasets/train/a.jsonl"
    parts: tuple[str, ...]
    sha256: str
    size: int
    executable: bool
    # False for the workspace: the job's working directory, which training code may edit in place,
    # so it always gets writable copies. Capsule and dataset files are read-only for the job.
    read_only: bool = True


def _entries(
    files: Sequence[ws_pb.WorkspaceFile], root: Path, label: str, field: str, *, read_only: bool = True
) -> Iterable[_Entry]:
    for i, f in enumerate(files):
        parts = check_relative_path(f.path, f"{field}[{i}].path")
        if not is_digest(f.sha256):
            raise errors.InvalidArgument(
                f"{label}/{f.path}: sha256 {f.sha256[:80]!r} is not 64 lowercase hex characters",
                field_violations=(errors.FieldViolation(f"{field}[{i}].sha256", "not a sha256 digest"),),
            )
        yield _Entry(root, f"{label}/{f.path}", parts, f.sha256, f.size, f.executable, read_only)


def plan(
    request: lr_pb.LaunchRequest, capsule_dir: Path, workspace_dir: Path, datasets_dir: Path | None
) -> list[_Entry]:
    """Every file of the request with its destination; validates paths, digests, dataset names."""
    out = list(_entries(request.capsule.files, capsule_dir, "capsule", "capsule.files"))
    out += _entries(request.spec.workspace.files, workspace_dir, "workspace", "spec.workspace.files", read_only=False)
    for i, ds in enumerate(request.datasets):
        if not DATASET_NAME.match(ds.name):
            raise errors.InvalidArgument(
                f"dataset name {ds.name!r} must be a letter or '_' followed by letters, digits or '_'",
                field_violations=(errors.FieldViolation(f"datasets[{i}].name", "not an identifier"),),
            )
        if datasets_dir is None:
            raise errors.InvalidArgument(f"dataset {ds.name!r} given but this executor has no datasets dir")
        out += _entries(
            ds.manifest.files, datasets_dir / ds.name, f"datasets/{ds.name}", f"datasets[{i}].manifest.files"
        )
    return out


def cache_path(cache_dir: Path, digest: str, executable: bool = False) -> Path:
    """Where a blob lives in the node's cache (`.x`: the executable twin)."""
    return cache_dir / digest[:2] / (digest + (".x" if executable else ""))


async def materialize(
    request: lr_pb.LaunchRequest,
    capsule_dir: Path,
    workspace_dir: Path,
    cache_dir: Path,
    datasets_dir: Path | None = None,
    *,
    concurrency: int = FETCH_CONCURRENCY,
    share_cache: bool = False,
    channels: BlobChannels | None = None,
) -> None:
    """Fetch what is missing from the cache, verify what is cached, then place every file.

    `share_cache`: hard-link capsule and dataset files from the cache (see the module docstring
    for when that is safe); otherwise they are private read-only copies. `channels`: the
    executor's open channels to the blob service, else one is opened for this call.

    Raises InvalidArgument for a path that could escape its root (absolute, '..', a symlink),
    FailedPrecondition when a blob is missing, its content does not match its digest, or a cache
    entry changed since it was fetched (the message names the file; the entry is evicted),
    Unavailable when the blob service cannot be reached.
    """
    planned = plan(request, capsule_dir, workspace_dir, datasets_dir)
    own = [e for e in planned if _attempt_only(e, request.capsule)]
    entries = [e for e in planned if e not in own]
    wanted: dict[str, _Entry] = {}
    for e in entries:
        wanted.setdefault(e.sha256, e)
    await asyncio.to_thread(_make_private, cache_dir)
    missing = [e for d, e in wanted.items() if not cache_path(cache_dir, d).is_file()]
    if missing or own:
        if not request.blob_source.address:
            raise errors.InvalidArgument(
                "blob_source.address is empty but files must be fetched",
                field_violations=(errors.FieldViolation("blob_source.address", "empty"),),
            )
        if missing:
            (cache_dir / "tmp").mkdir(parents=True, exist_ok=True)
        async with _channel(request.blob_source, channels) as channel:
            stub = blob_grpc.BlobServiceStub(channel)
            sem = asyncio.Semaphore(max(1, concurrency))

            async def one(e: _Entry) -> None:
                async with sem:
                    await _fetch(stub, e, cache_dir, request.blob_source)

            async def mine(e: _Entry) -> None:
                async with sem:
                    await _fetch_own(stub, e, request.blob_source)

            await _first_error([*(one(e) for e in missing), *(mine(e) for e in own)])
    await asyncio.to_thread(_verify_cache, entries, cache_dir)
    await asyncio.to_thread(_place_all, entries, cache_dir, share_cache)


@contextlib.asynccontextmanager
async def _channel(source: lr_pb.BlobSource, channels: BlobChannels | None) -> AsyncIterator[grpc.aio.Channel]:
    """A channel to the blob service (TLS verified with the CA the control plane sent when it
    serves TLS): the executor's open one, dropped when the service proved unreachable, or one of
    this call's own."""
    if channels is None:
        async with aio_channel(source.address, ca_credentials(source.ca_pem)) as own:
            yield own
        return
    channel = channels.get(source.address, source.ca_pem)
    try:
        yield channel
    except errors.Unavailable:
        channels.discard(channel)
        raise


def _attempt_only(e: _Entry, capsule: lr_pb.Capsule) -> bool:
    """Whether `e` is the attempt's own capsule.json: the file its `capsule_digest` names."""
    return e.label == "capsule/capsule.json" and e.sha256 == capsule.capsule_digest


def _make_private(cache_dir: Path) -> None:
    """The cache directory is the executor's alone: jobs reach entries only through their links."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(cache_dir, 0o700)


async def _first_error(coros: Sequence[Awaitable[None]]) -> None:
    """Run all; on the first failure cancel the rest and raise that failure (not a group)."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for t in tasks:
            if not t.done():
                t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for t in tasks:
        if t.done() and not t.cancelled() and t.exception() is not None:
            raise t.exception()  # type: ignore[misc]


async def _fetch(stub: blob_grpc.BlobServiceStub, e: _Entry, cache_dir: Path, source: lr_pb.BlobSource) -> None:
    """Download a blob into the cache under its digest."""
    target = cache_path(cache_dir, e.sha256)
    tmp = cache_dir / "tmp" / f"{e.sha256}.{os.getpid()}.{secrets.token_hex(4)}"
    try:
        await _download(stub, e, source, tmp, 0o444)
        target.parent.mkdir(parents=True, exist_ok=True)
        _publish(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


async def _fetch_own(stub: blob_grpc.BlobServiceStub, e: _Entry, source: lr_pb.BlobSource) -> None:
    """Download a file only this attempt uses straight to its place, never into the cache."""
    dest = e.root.joinpath(*e.parts)
    tmp = e.root / f".{e.parts[-1]}.{os.getpid()}.{secrets.token_hex(4)}.part"
    e.root.mkdir(parents=True, exist_ok=True)
    try:
        await _download(stub, e, source, tmp, _file_mode(e))
        if dest.is_dir() and not dest.is_symlink():
            raise errors.InvalidArgument(f"{e.label}: {dest} is a directory, not a file")
        os.replace(tmp, dest)  # a symbolic link there is replaced, never followed
    finally:
        tmp.unlink(missing_ok=True)


async def _download(stub: blob_grpc.BlobServiceStub, e: _Entry, source: lr_pb.BlobSource, tmp: Path, mode: int) -> None:
    """ReadBlob into `tmp` (created, never followed), hashed as it is written, then given `mode`
    through its descriptor; FailedPrecondition when the content does not match the manifest, the
    blob service's errors as `_blob_error`."""
    deadline = DEADLINE_BASE_SECONDS + max(e.size, 0) / DEADLINE_BYTES_PER_SECOND
    h = hashlib.sha256()
    received = 0
    try:
        with _create_new(tmp) as f:
            call = stub.ReadBlob(
                blob_pb.ReadBlobRequest(digest=e.sha256), timeout=deadline, metadata=bearer(source.token)
            )
            async for chunk in call:
                received += len(chunk.data)
                await asyncio.to_thread(_write_hashed, f, h, chunk.data)
            os.fchmod(f.fileno(), mode)
    except grpc.RpcError as rpc:
        raise _blob_error(rpc, e, source.address) from None
    actual = h.hexdigest()
    if actual != e.sha256 or received != e.size:
        found = f"sha256 {actual}, {received} bytes"
        raise errors.FailedPrecondition(
            f"{e.label}: the blob service sent content that does not match the manifest "
            f"(expected sha256 {e.sha256}, {e.size} bytes; found {found})",
            reason=reason_pb.ERROR_REASON_UNSPECIFIED,
            precondition_violations=(errors.PreconditionViolation("BLOB_DIGEST", e.label, found),),
        )


def _create_new(path: Path) -> BinaryIO:
    """A new file at `path`, never an existing one or one reached through a symbolic link."""
    return open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "wb")


def _write_hashed(f: object, h: hashlib._Hash, data: bytes) -> None:
    f.write(data)  # type: ignore[attr-defined]
    h.update(data)


def _blob_error(rpc: grpc.RpcError, e: _Entry, address: str) -> errors.StarforgeError:
    """A failed ReadBlob as the error Launch reports (the message names the file)."""
    err = from_rpc_error(rpc)
    where = f"{e.label} (blob {e.sha256[:12]}) from the blob service at {address}"
    if isinstance(err, errors.NotFound):
        return errors.FailedPrecondition(
            f"cannot fetch {where}: the blob was never uploaded",
            reason=reason_pb.ERROR_REASON_MISSING_BLOB,
            precondition_violations=(errors.PreconditionViolation("MISSING_BLOB", e.label, e.sha256),),
        )
    if isinstance(err, errors.Unauthenticated | errors.PermissionDenied):
        return errors.FailedPrecondition(
            f"cannot fetch {where}: the blob service refused the attempt's run token ({err.message})",
            reason=err.reason,
        )
    if isinstance(err, errors.Unavailable | errors.DeadlineExceeded):
        return errors.Unavailable(f"cannot fetch {where}: {err.message}")
    return type(err)(f"cannot fetch {where}: {err.message}", reason=err.reason)


# (st_dev, st_ino, st_size, st_mtime_ns) -> sha256 of cache entries this process hashed (see the
# module docstring for why mtime and not ctime).
_verified: dict[tuple[int, int, int, int], str] = {}


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _check_entry(path: Path, e: _Entry, mode: int) -> None:
    """Raise FailedPrecondition (after evicting it) when a cache entry's content changed."""
    st = path.stat()
    if stat.S_IMODE(st.st_mode) != mode:
        os.chmod(path, mode)  # an entry of an older cache (0644/0755): read-only from now on
        st = path.stat()
    if _verified.get(_identity(st)) == e.sha256:
        return
    found = sha256_file(path)
    if found != e.sha256:
        path.unlink(missing_ok=True)
        raise errors.FailedPrecondition(
            f"{e.label}: the executor's cache entry {path.name[:16]} was modified since it was fetched "
            f"(expected sha256 {e.sha256}, found {found}); it was removed and nothing of this attempt "
            "ran; launch it again to fetch a fresh copy",
            reason=reason_pb.ERROR_REASON_UNSPECIFIED,
            metadata={"failure_class": "PRECHECK"},
            precondition_violations=(errors.PreconditionViolation("BLOB_DIGEST", e.label, found),),
        )
    _verified[_identity(path.stat())] = e.sha256


def _verify_cache(entries: Sequence[_Entry], cache_dir: Path) -> None:
    """Hash every cache entry the attempt uses (memoised per unchanged inode)."""
    checked: set[tuple[str, bool]] = set()
    for e in entries:
        for executable in {False, e.executable and e.read_only}:
            if (e.sha256, executable) in checked:
                continue
            path = cache_path(cache_dir, e.sha256, executable)
            if executable and not path.is_file():
                continue  # made from the verified plain entry when placed
            try:
                _check_entry(path, e, 0o555 if executable else 0o444)
            except errors.FailedPrecondition:
                cache_path(cache_dir, e.sha256, True).unlink(missing_ok=True)
                raise
            checked.add((e.sha256, executable))


def _place_all(entries: Sequence[_Entry], cache_dir: Path, share_cache: bool) -> None:
    for root in {e.root for e in entries}:
        root.mkdir(parents=True, exist_ok=True)
    for e in entries:
        src = cache_path(cache_dir, e.sha256)
        link = share_cache and e.read_only
        if e.executable and link:
            src = _executable_twin(cache_dir, e.sha256)
        _place(e, src, link)


def _executable_twin(cache_dir: Path, digest: str) -> Path:
    """`<d>.x`: a 0555 copy of the blob, made once, so executables link without chmod."""
    twin = cache_path(cache_dir, digest, executable=True)
    if not twin.is_file():
        tmp = twin.with_name(f"{twin.name}.{os.getpid()}.{secrets.token_hex(4)}")
        shutil.copyfile(cache_path(cache_dir, digest), tmp)
        os.chmod(tmp, 0o555)  # noqa: S103 - read-only, executable by the jobs that link it
        try:
            _publish(tmp, twin)
        finally:
            tmp.unlink(missing_ok=True)
    return twin


def _publish(tmp: Path, target: Path) -> None:
    """Give a complete file its cache name, unless a concurrent fetch already did.

    A published entry is never replaced: Linux refuses to hard-link an inode whose last name was
    just renamed over (ENOENT), so replacing an entry while another launch links it from the cache
    failed that launch (11 concurrent launches of one capsule did, 1 run in 8). The caller removes
    `tmp` afterwards.
    """
    try:
        os.link(tmp, target)
    except FileExistsError:
        pass  # same digest, same content: the first copy stays
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise
        os.replace(tmp, target)  # a file system without hard links: no links from the cache either


def _file_mode(e: _Entry) -> int:
    """Read-only files stay read-only in private copies too; workspace files are the job's."""
    if e.read_only:
        return 0o555 if e.executable else 0o444
    return 0o755 if e.executable else 0o644


def _place(e: _Entry, src: Path, link: bool) -> None:
    """Link (or copy) `src` to its destination, refusing any way out of the root."""
    cur = e.root
    for part in e.parts[:-1]:
        cur = cur / part
        if cur.is_symlink():
            raise errors.InvalidArgument(f"{e.label}: {cur} is a symbolic link; refusing to follow it")
        if not cur.exists():
            cur.mkdir()
        elif not cur.is_dir():
            raise errors.InvalidArgument(f"{e.label}: {cur} is a file, not a directory")
    dest = cur / e.parts[-1]
    if dest.is_symlink() or dest.is_file():
        dest.unlink()
    elif dest.exists():
        raise errors.InvalidArgument(f"{e.label}: {dest} is a directory, not a file")
    if link:
        try:
            os.link(src, dest)
            return
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                raise
    shutil.copyfile(src, dest)
    os.chmod(dest, _file_mode(e))


def verify_file(root: Path, path: str, files: Sequence[ws_pb.WorkspaceFile], label: str) -> None:
    """Check a placed file against its manifest digest; FailedPrecondition when it differs.

    The executor calls this for bootstrap.sh right before it starts it: bootstrap.sh checks every
    other file, so it is the one file whose integrity the executor must establish itself.
    """
    entry = next((f for f in files if f.path == path), None)
    if entry is None:
        raise errors.InvalidArgument(
            f"{label}/{path} is not in the request's manifest; the executor cannot run an unverified capsule",
            field_violations=(errors.FieldViolation("capsule.files", f"no {path}"),),
        )
    try:
        found = sha256_file(root / path)
    except FileNotFoundError:
        found = "nothing (the file is missing)"
    if found != entry.sha256:
        raise errors.FailedPrecondition(
            f"{label}/{path} does not match the capsule manifest (expected sha256 {entry.sha256}, found "
            f"{found}); the executor refused to run it",
            reason=reason_pb.ERROR_REASON_UNSPECIFIED,
            metadata={"failure_class": "PRECHECK"},
            precondition_violations=(errors.PreconditionViolation("BLOB_DIGEST", f"{label}/{path}", found),),
        )


def verify_bootstrap(request: lr_pb.LaunchRequest, capsule_dir: Path) -> None:
    """`verify_file` for the capsule's bootstrap.sh."""
    verify_file(capsule_dir, "bootstrap.sh", request.capsule.files, "capsule")


def clear_tmp(cache_dir: Path) -> None:
    """Remove temporary downloads left by a crashed executor of this node (call at start-up)."""
    with contextlib.suppress(FileNotFoundError):
        for leftover in (cache_dir / "tmp").iterdir():
            leftover.unlink(missing_ok=True)
