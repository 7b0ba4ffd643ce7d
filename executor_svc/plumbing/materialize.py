"""An attempt's directories made afresh and its capsule, workspace and datasets placed in them."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from starforge_api.executor.v1 import launch_request_pb2 as lr_pb

from executor_svc import bundle
from executor_svc.attempt_dirs import AttemptDirs
from executor_svc.plumbing.blob_channels import BlobChannels


def make_attempt_dirs(dirs: AttemptDirs, out_dir: Path) -> None:
    """Remove what a failed launch left, then make the attempt's directories and the out dir.

    The attempt's root is 0700: the kind opens it to the job's user alone. The out dir is kept
    when it exists (it holds the job's checkpoints).
    """
    shutil.rmtree(dirs.root, ignore_errors=True)
    dirs.root.mkdir(mode=0o700, parents=True)
    for d in (dirs.capsule, dirs.datasets, dirs.workspace, dirs.scratch, out_dir):
        d.mkdir(parents=True, exist_ok=True)


async def materialize_attempt(
    request: lr_pb.LaunchRequest,
    dirs: AttemptDirs,
    out_dir: Path,
    cache_dir: Path,
    *,
    concurrency: int,
    share_cache: bool,
    channels: BlobChannels | None = None,
) -> None:
    """Fresh directories, then every file fetched (digest-checked) and placed (`bundle.materialize`)."""
    await asyncio.to_thread(make_attempt_dirs, dirs, out_dir)
    await bundle.materialize(
        request,
        dirs.capsule,
        dirs.workspace,
        cache_dir,
        dirs.datasets,
        concurrency=concurrency,
        share_cache=share_cache,
        channels=channels,
    )


async def remove_attempt_root(dirs: AttemptDirs) -> None:
    """Remove everything of an attempt whose launch failed before its record was kept."""
    await asyncio.to_thread(shutil.rmtree, dirs.root, True)
