"""Materialise an attempt's files (capsule, workspace, datasets) from the control plane's blobs.

Blobs are fetched from BlobService (`ReadBlob`, with the attempt's run token) into a node-wide,
content-addressed cache `<cache>/<d[:2]>/<d>`: each download is hashed while written to a
temporary file and renamed into place only when it matches its digest, so the cache never holds a
partial or wrong blob, and an unchanged lab downloads nothing on the second attempt. Capsule and
dataset files are then hard-linked into place (a copy across devices); workspace files are copied,
since the workspace is the job's working directory and training code may edit files there in place.

Cached blobs are not hashed again when reused: that is cheap, and it is safe because bootstrap.sh
verifies every file against capsule.json before anything runs (a corrupted cache entry makes the
attempt fail with bootstrap's integrity message instead of running wrong code).

Hard links share their inode, so a file's mode belongs to its cache entry: executable files link a
second entry `<d>.x` (0755) and all others the plain one (0644); a later attempt never changes the
mode of a file an earlier one is running.
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
from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
from starforge.control.v1 import blob_service_pb2 as blob_pb
from starforge.control.v1 import blob_service_pb2_grpc as blob_grpc
from starforge.control.v1 import error_reason_pb2 as reason_pb
from starforge.executor.v1 import launch_request_pb2 as lr_pb
from starforge.job.v1 import workspace_pb2 as ws_pb

from common import errors
from common.channel import aio_channel, bearer
from common.hashing import is_digest
from common.rpc_status import from_rpc_error
from common.sensitive import MAX_NAME_BYTES
from common.tls import ca_credentials

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
    # Hard-link from the cache (capsule, datasets: never written by jobs) or copy (the workspace:
    # the job's working directory, which training code may edit in place — a link would let it
    # corrupt the cache for every later attempt).
    link: bool = True


def check_relative_path(path: str, field: str) -> tuple[str, ...]:
    """The components of a manifest path, or InvalidArgument when it could leave its root."""
    reason = ""
    if not path:
        reason = "is empty"
    elif path.startswith("/"):
        reason = "is absolute"
    elif "\\" in path or "\x00" in path:
        reason = "contains a backslash or NUL"
    elif any(p in ("", ".", "..") for p in path.split("/")):
        reason = "has an empty, '.' or '..' component"
    elif any(len(p.encode()) > MAX_NAME_BYTES for p in path.split("/")):
        reason = f"has a component longer than {MAX_NAME_BYTES} bytes"  # no file system takes it
    if reason:
        raise errors.InvalidArgument(
            f"file path {path[:200]!r} {reason}; paths must be relative, '/'-separated, without '..'",
            field_violations=(errors.FieldViolation(field, reason),),
        )
    return tuple(path.split("/"))


def _entries(
    files: Sequence[ws_pb.WorkspaceFile], root: Path, label: str, field: str, *, link: bool = True
) -> Iterable[_Entry]:
    for i, f in enumerate(files):
        parts = check_relative_path(f.path, f"{field}[{i}].path")
        if not is_digest(f.sha256):
            raise errors.InvalidArgument(
                f"{label}/{f.path}: sha256 {f.sha256[:80]!r} is not 64 lowercase hex characters",
                field_violations=(errors.FieldViolation(f"{field}[{i}].sha256", "not a sha256 digest"),),
            )
        yield _Entry(root, f"{label}/{f.path}", parts, f.sha256, f.size, f.executable, link)


def plan(
    request: lr_pb.LaunchRequest, capsule_dir: Path, workspace_dir: Path, datasets_dir: Path | None
) -> list[_Entry]:
    """Every file of the request with its destination; validates paths, digests, dataset names."""
    out = list(_entries(request.capsule.files, capsule_dir, "capsule", "capsule.files"))
    out += _entries(request.spec.workspace.files, workspace_dir, "workspace", "spec.workspace.files", link=False)
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
) -> None:
    """Fetch what is missing from the cache, then place every file of the attempt.

    Raises InvalidArgument for a path that could escape its root (absolute, '..', a symlink),
    FailedPrecondition when a blob is missing or its content does not match its digest (the
    message names the file), Unavailable when the blob service cannot be reached.
    """
    entries = plan(request, capsule_dir, workspace_dir, datasets_dir)
    wanted: dict[str, _Entry] = {}
    for e in entries:
        wanted.setdefault(e.sha256, e)
    missing = [e for d, e in wanted.items() if not cache_path(cache_dir, d).is_file()]
    if missing:
        if not request.blob_source.address:
            raise errors.InvalidArgument(
                "blob_source.address is empty but files must be fetched",
                field_violations=(errors.FieldViolation("blob_source.address", "empty"),),
            )
        (cache_dir / "tmp").mkdir(parents=True, exist_ok=True)
        sem = asyncio.Semaphore(max(1, concurrency))
        # TLS verified with the CA the control plane sent when it serves TLS
        credentials = ca_credentials(request.blob_source.ca_pem)
        async with aio_channel(request.blob_source.address, credentials) as channel:
            stub = blob_grpc.BlobServiceStub(channel)

            async def one(e: _Entry) -> None:
                async with sem:
                    await _fetch(stub, e, cache_dir, request.blob_source)

            await _first_error([one(e) for e in missing])
    await asyncio.to_thread(_place_all, entries, cache_dir)


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
    target = cache_path(cache_dir, e.sha256)
    tmp = cache_dir / "tmp" / f"{e.sha256}.{os.getpid()}.{secrets.token_hex(4)}"
    deadline = DEADLINE_BASE_SECONDS + max(e.size, 0) / DEADLINE_BYTES_PER_SECOND
    h = hashlib.sha256()
    received = 0
    try:
        with tmp.open("wb") as f:
            call = stub.ReadBlob(
                blob_pb.ReadBlobRequest(digest=e.sha256), timeout=deadline, metadata=bearer(source.token)
            )
            async for chunk in call:
                received += len(chunk.data)
                await asyncio.to_thread(_write_hashed, f, h, chunk.data)
        actual = h.hexdigest()
        if actual != e.sha256 or received != e.size:
            found = f"sha256 {actual}, {received} bytes"
            raise errors.FailedPrecondition(
                f"{e.label}: the blob service sent content that does not match the manifest "
                f"(expected sha256 {e.sha256}, {e.size} bytes; found {found})",
                reason=reason_pb.ERROR_REASON_UNSPECIFIED,
                precondition_violations=(errors.PreconditionViolation("BLOB_DIGEST", e.label, found),),
            )
        os.chmod(tmp, 0o644)
        target.parent.mkdir(parents=True, exist_ok=True)
        _publish(tmp, target)
    except grpc.RpcError as rpc:
        raise _blob_error(rpc, e, source.address) from None
    finally:
        tmp.unlink(missing_ok=True)


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


def _place_all(entries: Sequence[_Entry], cache_dir: Path) -> None:
    for root in {e.root for e in entries}:
        root.mkdir(parents=True, exist_ok=True)
    for e in entries:
        src = cache_path(cache_dir, e.sha256)
        if e.executable:
            src = _executable_twin(cache_dir, e.sha256)
        _place(e, src)


def _executable_twin(cache_dir: Path, digest: str) -> Path:
    """`<d>.x`: a 0755 copy of the blob, made once, so executables link without chmod."""
    twin = cache_path(cache_dir, digest, executable=True)
    if not twin.is_file():
        tmp = twin.with_name(f"{twin.name}.{os.getpid()}.{secrets.token_hex(4)}")
        shutil.copyfile(cache_path(cache_dir, digest), tmp)
        os.chmod(tmp, 0o755)  # noqa: S103 - an executable of the job, like any installed program
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


def _place(e: _Entry, src: Path) -> None:
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
    if e.link:
        try:
            os.link(src, dest)
            return
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                raise
    shutil.copyfile(src, dest)
    os.chmod(dest, 0o755 if e.executable else 0o644)


def clear_tmp(cache_dir: Path) -> None:
    """Remove temporary downloads left by a crashed executor of this node (call at start-up)."""
    with contextlib.suppress(FileNotFoundError):
        for leftover in (cache_dir / "tmp").iterdir():
            leftover.unlink(missing_ok=True)
