"""`sf job artifacts` / `sf job download`: list a job's FORGE_OUT_DIR and fetch files from it.

Downloads go through the console (ControlService.DownloadJobArtifact), which streams them from
the executor that holds them. Each file is written to `<to>/<path>.sfpart` and renamed to
`<to>/<path>` only after its sha256 matches the listing; a `.sfpart` left by an interrupted
download is continued from its size (the request's offset). A file already at its place with the
listed sha256 is not fetched again; one with other content is refused unless `--overwrite`.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn
from starforge_api.control.v1 import control_service_pb2 as pb
from starforge_api.job.v1 import artifact_pb2

from cli.client import Client
from cli.errors import EXIT_FAILURE, CliError, usage
from cli.output import Output
from common import errors
from common.artifact_paths import split_path

PART_SUFFIX = ".sfpart"
PAGE = 1000


def kind_name(a: artifact_pb2.Artifact) -> str:
    return "symlink" if a.kind == artifact_pb2.ARTIFACT_KIND_SYMLINK else "file"


def artifact_dict(a: artifact_pb2.Artifact) -> dict[str, Any]:
    """One artifact as `--output json` prints it (sizes as numbers)."""
    d: dict[str, Any] = {"path": a.path, "kind": kind_name(a), "size": a.size, "sha256": a.sha256}
    d["modify_time"] = a.modify_time.ToJsonString() if a.HasField("modify_time") else None
    if a.kind == artifact_pb2.ARTIFACT_KIND_SYMLINK:
        d["link_target"] = a.link_target
    return d


def list_all(client: Client, job_id: str) -> tuple[list[artifact_pb2.Artifact], str]:
    """Every artifact of the job (all pages) and the attempt whose out dir was listed."""
    found: list[artifact_pb2.Artifact] = []
    token, attempt_id = "", ""
    while True:
        r = client.call(
            client.control.ListJobArtifacts,
            pb.ListJobArtifactsRequest(job_id=job_id, page_size=PAGE, page_token=token),
            timeout=max(client.timeout, 300.0),  # a first listing hashes every file
        )
        found.extend(r.artifacts)
        attempt_id = r.attempt_id
        token = r.next_page_token
        if not token:
            return found, attempt_id


def select(artifacts: list[artifact_pb2.Artifact], path: str) -> list[artifact_pb2.Artifact]:
    """The files `path` names: one file, every file under a directory prefix, or all ("")."""
    files = [a for a in artifacts if a.kind == artifact_pb2.ARTIFACT_KIND_FILE]
    if not path:
        return files
    path = path.strip("/")
    try:
        split_path(path, "PATH")
    except errors.InvalidArgument as exc:
        raise usage(exc.message) from None
    exact = [a for a in artifacts if a.path == path]
    if exact and exact[0].kind == artifact_pb2.ARTIFACT_KIND_SYMLINK:
        raise CliError(f"{path} is a link in the job's out dir; links are listed, never downloaded", EXIT_FAILURE)
    if exact:
        return exact
    under = [a for a in files if a.path.startswith(path + "/")]
    if not under:
        raise usage(f"the job has no artifact {path!r}", hint="list them with `sf job artifacts <job>`")
    return under


@dataclass
class Fetched:
    """What happened to one file."""

    path: str
    size: int
    sha256: str
    status: str  # "downloaded", "resumed", "unchanged"
    resumed_from: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "size": self.size,
            "sha256": self.sha256,
            "status": self.status,
            "resumed_from": self.resumed_from,
        }


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def target_of(root: Path, artifact_path: str) -> Path:
    """Where an artifact goes under `root` (its path is checked again: it came from the job)."""
    try:
        parts = split_path(artifact_path)
    except errors.InvalidArgument as exc:
        raise CliError(f"the console listed an unsafe path: {exc.message}", EXIT_FAILURE) from None
    return root.joinpath(*parts)


class Downloader:
    """Fetches artifacts of one job into `root`."""

    def __init__(self, client: Client, job_id: str, root: Path, *, overwrite: bool) -> None:
        self.client = client
        self.job_id = job_id
        self.root = root
        self.overwrite = overwrite

    def fetch(self, a: artifact_pb2.Artifact, advance: Callable[[int], None]) -> Fetched:
        target = target_of(self.root, a.path)
        if target.is_symlink() or (target.exists() and not target.is_file()):
            raise CliError(f"{target} exists and is not a regular file; move it away first", EXIT_FAILURE)
        if target.exists():
            if file_sha256(target) == a.sha256:
                advance(a.size)
                return Fetched(a.path, a.size, a.sha256, "unchanged")
            if not self.overwrite:
                raise CliError(
                    f"{target} exists with other content", EXIT_FAILURE, hint="pass --overwrite to replace it"
                )
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_name(target.name + PART_SUFFIX)
        start = part.stat().st_size if part.is_file() and not part.is_symlink() else 0
        if start > a.size:
            start = 0  # a partial of an older, larger version: start again
        advance(start)
        self._stream(a, part, start, advance)
        got = file_sha256(part)
        if got != a.sha256:
            part.unlink()
            raise CliError(
                f"{a.path}: sha256 {got[:16]}… does not match the listing's {a.sha256[:16]}…; the file "
                "changed while it was fetched (or the partial download was not of this file); run again",
                EXIT_FAILURE,
            )
        os.replace(part, target)
        return Fetched(a.path, a.size, a.sha256, "resumed" if start else "downloaded", start)

    def _stream(self, a: artifact_pb2.Artifact, part: Path, start: int, advance: Callable[[int], None]) -> None:
        request = pb.DownloadJobArtifactRequest(job_id=self.job_id, path=a.path, offset=start)
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if start else os.O_TRUNC)
        fd = os.open(part, flags, 0o644)
        try:
            call = self.client.stream(self.client.control.DownloadJobArtifact, request)
            try:
                for chunk in call:
                    if chunk.size != a.size:
                        raise CliError(
                            f"{a.path} changed since it was listed (now {chunk.size} bytes); run again", EXIT_FAILURE
                        )
                    os.write(fd, chunk.data)
                    advance(len(chunk.data))
            except grpc.RpcError as err:
                raise self.client.error(err) from None
        finally:
            os.close(fd)


def download(
    client: Client, job_id: str, chosen: list[artifact_pb2.Artifact], root: Path, out: Output, *, overwrite: bool
) -> list[Fetched]:
    """Fetch `chosen` into `root`, with a progress bar when a person watches stderr."""
    d = Downloader(client, job_id, root, overwrite=overwrite)
    total = sum(a.size for a in chosen)
    if not out.interactive:
        return [d.fetch(a, lambda n: None) for a in chosen]
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=out.err, transient=True) as progress:
        task = progress.add_task("downloading", total=total)
        return [d.fetch(a, lambda n: progress.advance(task, n)) for a in chosen]
