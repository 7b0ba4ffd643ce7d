"""Content digests (sha256, lowercase hex) used for blobs, manifests and the capsule."""

from __future__ import annotations

import hashlib
import pathlib
import re
from collections.abc import Iterable

DIGEST_RE = re.compile(r"^[0-9a-f]{64}$")
CHUNK = 1 << 20
# The largest blob (one file of a workspace or dataset) the blob store takes; the packer refuses
# bigger files before hashing them (a sparse 100 GiB file would otherwise be read to the end).
MAX_BLOB_BYTES = 8 << 30


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def is_digest(value: str) -> bool:
    return bool(DIGEST_RE.fullmatch(value))


def manifest_digest(files: Iterable[tuple[str, str, bool]]) -> str:
    """A workspace manifest's digest: sha256 over "<sha256> <mode> <path>\\n" lines of the files
    (path, sha256, executable) sorted by path, mode 755 for executables and 644 otherwise."""
    h = hashlib.sha256()
    for path, digest, executable in sorted(files):
        h.update(f"{digest} {'755' if executable else '644'} {path}\n".encode())
    return h.hexdigest()
