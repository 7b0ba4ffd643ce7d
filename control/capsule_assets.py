"""The capsule files the control plane ships with every attempt (built by `make capsule`).

`build/capsule/manifest.json` (written by capsule.build) lists bootstrap.sh, runner-<digest>.pex
and the SDK with their digests. At start the control plane stores them in its blob store, so
executors fetch them like any other blob, and records the runner digest for provenance.
"""

from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass

from common.config import ConfigError
from common.hashing import sha256_file
from control.blobstore import BlobStore


@dataclass(frozen=True)
class CapsuleFile:
    path: str
    sha256: str
    size: int
    executable: bool


@dataclass(frozen=True)
class CapsuleAssets:
    runner: str  # file name, e.g. runner-0123456789abcdef.pex
    runner_digest: str
    files: tuple[CapsuleFile, ...]


def load(capsule_dir: pathlib.Path, store: BlobStore) -> CapsuleAssets:
    manifest_path = capsule_dir / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text())
    except FileNotFoundError:
        raise ConfigError(
            f"capsule not built: {manifest_path} is missing; run `make capsule` "
            "(python -m capsule.build --out build/capsule)"
        ) from None
    files = []
    for entry in manifest["files"]:
        source = pathlib.Path(entry["source"])
        if not source.is_absolute():
            source = capsule_dir / source
        digest = sha256_file(source)
        if digest != entry["sha256"]:
            raise ConfigError(f"capsule file {source} changed since the build; run `make capsule` again")
        store.put_file(source)
        files.append(CapsuleFile(entry["path"], digest, source.stat().st_size, bool(entry.get("executable"))))
    runner = manifest["runner"]
    return CapsuleAssets(runner=runner["path"], runner_digest=runner["sha256"], files=tuple(files))
