"""The image digest an attempt records in its provenance.

- An image that is a file (a `.sif` for apptainer, a `.sqsh` for pyxis/enroot): `sha256:<hex>` of
  that file, read on the executor's host (the shared file system the nodes mount too) when the
  attempt is launched, so it names the bytes the job starts from.
- An image reference pyxis pulls itself (`registry#repo:tag`): the digest the control plane
  resolved, when it sent one; otherwise `unresolved:<ref> (...)` (the runtime pulls the tag at
  run time). An image file the executor cannot read: `unresolved:<path> (...)`.
- No container (`container_runtime: none`): `no-image:host`, never an empty string.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path

from starforge_api.executor.v1 import launch_request_pb2 as lr_pb

from executor_svc.slurm.script import Container

# Short, as `sf` shows the first 16 characters of a digest: "no image, ran on the node's host system".
NO_CONTAINER = "no-image:host"
_CHUNK = 1 << 20
# (path, device, inode, size, mtime_ns) -> digest: an image file is hashed once while unchanged.
_CACHE: dict[tuple[str, int, int, int, int], str] = {}


def file_sha256(path: Path) -> str:
    """`sha256:<hex>` of the file at `path` (cached while its inode, size and mtime stay)."""
    st = os.stat(path)
    key = (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _CACHE:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                h.update(chunk)
        _CACHE[key] = "sha256:" + h.hexdigest()
    return _CACHE[key]


def _is_file_image(image: str) -> bool:
    return image.startswith("/")


async def image_digest(container: Container | None, request: lr_pb.LaunchRequest) -> str:
    """What the attempt's provenance records as its image digest (see the module's doc)."""
    if container is None:
        return NO_CONTAINER
    if _is_file_image(container.image):
        try:
            return await asyncio.to_thread(file_sha256, Path(container.image))
        except OSError as exc:
            return f"unresolved:{container.image} (not readable on the executor host: {exc.strerror})"
    if request.image_digest:
        return request.image_digest
    return f"unresolved:{container.image} ({container.runtime} pulls it at run time)"
