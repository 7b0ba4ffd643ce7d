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


def sha256_file(path: str | pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
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


def manifest_text(files: Iterable[tuple[str, str, bool]]) -> bytes:
    """The canonical manifest itself, whose sha256 is `manifest_digest` of the same files: the
    console stores it as a blob so that a workspace can be named by that digest alone."""
    return "".join(
        f"{digest} {'755' if executable else '644'} {path}\n" for path, digest, executable in sorted(files)
    ).encode()


def parse_manifest_text(data: bytes) -> list[tuple[str, str, bool]] | None:
    """The (path, sha256, executable) entries of a canonical manifest, or None when `data` is not
    one (a line that is not "<sha256> <755|644> <path>", a path out of order or listed twice, text
    that is not UTF-8). The paths themselves are checked by whoever admits the manifest."""
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return None
    if text and not text.endswith("\n"):
        return None
    out: list[tuple[str, str, bool]] = []
    previous = ""
    for line in text.split("\n")[:-1]:
        digest, mode, path = line[:64], line[65:68], line[69:]
        if line[64:65] != " " or line[68:69] != " " or mode not in ("755", "644") or not is_digest(digest):
            return None
        if not path or (out and path <= previous):
            return None
        out.append((path, digest, mode == "755"))
        previous = path
    return out
