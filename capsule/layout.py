"""capsule.json (schema starforge.capsule/v2) and the capsule directory, per docs/ARCHITECTURE.md.

capsule.json is the contract's ``starforge.executor.v1.CapsuleManifest`` in protobuf's JSON mapping
(proto field names, every field printed); the runner reads it with the generated pure-Python code,
so the two sides cannot drift. The control plane's assembly calls ``capsule_json`` for each attempt
and passes the sha256 of the returned bytes to the executor as ``capsule_digest``
(FORGE_CAPSULE_SHA256); bootstrap.sh refuses to start on any difference.

    files = capsule_files_from_manifest(json.loads(pathlib.Path("build/capsule/manifest.json").read_bytes()))
    data = capsule_json(job_id=..., attempt_id=..., attempt_number=1, runner=runner_from_manifest(m),
                        capsule_files=files, workspace_files=ws_files, run=RunInfo(...))
    digest = hashlib.sha256(data).hexdigest()
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format
from starforge_api.executor.v1 import capsule_pb2

from common.relpath import relative_path_problem

SCHEMA = "starforge.capsule/v2"
STAGES = {
    "": capsule_pb2.CAPSULE_STAGE_TRAIN,
    "train": capsule_pb2.CAPSULE_STAGE_TRAIN,
    "export": capsule_pb2.CAPSULE_STAGE_EXPORT,
    "eval": capsule_pb2.CAPSULE_STAGE_EVAL,
}
CAPSULE_JSON = "capsule.json"
RUNNER_RE = re.compile(r"^runner-[0-9a-f]{16}\.pex$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
CHUNK = 1 << 20


@dataclass(frozen=True)
class FileEntry:
    """One file of the capsule or the workspace: relative "/" path, content digest, size, mode."""

    path: str
    sha256: str
    size: int
    executable: bool = False


@dataclass(frozen=True)
class PoolInfo:
    name: str
    series: str
    nodes: int
    gpus_per_node: int


@dataclass(frozen=True)
class RunInfo:
    """capsule.json ``run``: what the runner runs (see capsule/runner/capsule_file.py)."""

    method: str
    adapter: str
    experiment: str
    entrypoint: str
    config: Mapping[str, Any] = field(default_factory=dict)
    observability: str = "platform"
    model: str = ""
    train_data: str = ""
    validation_data: str = ""
    pools: Sequence[PoolInfo] = ()
    # Pipeline stage this job runs ("train", "export", "eval"); empty means training.
    stage: str = ""
    # External observability: tracker URL and tool ("wandb", "mlflow", "").
    observability_url: str = ""
    observability_tool: str = ""
    # The catalog runtime: id, declared Python version, declared capabilities.
    runtime_id: str = ""
    runtime_python: str = ""
    runtime_capabilities: Sequence[str] = ()


def check_path(path: str) -> str:
    """`path` when it follows the relative-path rule (common/relpath.py); ValueError otherwise."""
    problem = relative_path_problem(path)
    if problem:
        raise ValueError(
            f"capsule path {path!r} {problem}: it must be relative, use '/' and must not contain "
            "empty, '.' or '..' parts"
        )
    return path


def _entry(root: str, f: FileEntry) -> capsule_pb2.CapsuleFile:
    check_path(f.path)
    if not SHA256_RE.match(f.sha256):
        raise ValueError(f"{root}/{f.path}: sha256 must be 64 lowercase hex digits, got {f.sha256!r}")
    if f.size < 0:
        raise ValueError(f"{root}/{f.path}: size must be >= 0")
    return capsule_pb2.CapsuleFile(root=root, path=f.path, sha256=f.sha256, size=f.size, executable=f.executable)


def _run(run: RunInfo) -> capsule_pb2.CapsuleRun:
    if run.stage not in STAGES:
        raise ValueError(f"stage {run.stage!r} is not one of train, export, eval")
    return capsule_pb2.CapsuleRun(
        method=run.method,
        adapter=run.adapter,
        experiment=run.experiment,
        entrypoint=run.entrypoint,
        config_json=json.dumps(dict(run.config), ensure_ascii=False, allow_nan=False, sort_keys=False),
        observability=run.observability,
        model=run.model,
        train_data=run.train_data,
        validation_data=run.validation_data,
        pools=[
            capsule_pb2.CapsulePool(name=p.name, series=p.series, nodes=p.nodes, gpus_per_node=p.gpus_per_node)
            for p in run.pools
        ],
        stage=STAGES[run.stage],
        observability_url=run.observability_url,
        observability_tool=run.observability_tool,
        runtime_id=run.runtime_id,
        runtime_python=run.runtime_python,
        runtime_capabilities=list(run.runtime_capabilities),
    )


def capsule_json(
    *,
    job_id: str,
    attempt_id: str,
    attempt_number: int,
    runner: str,
    capsule_files: Iterable[FileEntry],
    workspace_files: Iterable[FileEntry],
    run: RunInfo,
) -> bytes:
    """The exact bytes of capsule.json. Deterministic: same inputs, same bytes, same digest.

    Files are listed capsule first, then workspace, each sorted by path. capsule.json never lists
    itself; the runner must be one of the capsule files.
    """
    if not RUNNER_RE.match(runner):
        raise ValueError(f"runner {runner!r} is not runner-<sha256[:16]>.pex")
    capsule = sorted(capsule_files, key=lambda f: f.path)
    workspace = sorted(workspace_files, key=lambda f: f.path)
    names = [f.path for f in capsule]
    if CAPSULE_JSON in names:
        raise ValueError("capsule.json cannot list itself")
    if runner not in names:
        raise ValueError(f"the runner {runner} is not among the capsule files")
    for label, group in (("capsule", capsule), ("workspace", workspace)):
        paths = [f.path for f in group]
        if len(set(paths)) != len(paths):
            raise ValueError(f"{label} files list a path twice")
    manifest = capsule_pb2.CapsuleManifest(
        schema=SCHEMA,
        job_id=job_id,
        attempt_id=attempt_id,
        attempt_number=attempt_number,
        runner=runner,
        files=[_entry("capsule", f) for f in capsule] + [_entry("workspace", f) for f in workspace],
        run=_run(run),
    )
    text = json_format.MessageToJson(
        manifest, preserving_proto_field_name=True, always_print_fields_with_no_presence=True, indent=2
    )
    return (text + "\n").encode("utf-8")


# -- the built capsule (build/capsule/manifest.json) ---------------------------------------------


def capsule_files_from_manifest(manifest: Mapping[str, Any]) -> list[FileEntry]:
    """The capsule files of a ``python -m capsule.build`` manifest, as capsule.json entries."""
    return [
        FileEntry(path=f["path"], sha256=f["sha256"], size=int(f["size"]), executable=bool(f["executable"]))
        for f in manifest["files"]
    ]


def runner_from_manifest(manifest: Mapping[str, Any]) -> str:
    return str(manifest["runner"]["path"])


def load_manifest(build_dir: pathlib.Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((build_dir / "manifest.json").read_bytes())
    return loaded


def install_capsule(manifest: Mapping[str, Any], capsule_json_bytes: bytes, dest: pathlib.Path) -> None:
    """Lay out a capsule directory from a build: the manifest's files (copied from their
    ``source``, executable bits set) plus capsule.json. For the local process executor and tests;
    remote executors fetch the same files from the BlobService instead."""
    dest.mkdir(parents=True, exist_ok=True)
    for f in manifest["files"]:
        target = dest / check_path(f["path"])
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f["source"], target)
        target.chmod(0o755 if f["executable"] else 0o644)
    (dest / CAPSULE_JSON).write_bytes(capsule_json_bytes)


# -- describing files on disk ------------------------------------------------------------------


def sha256_file(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def describe_file(root: pathlib.Path, relative: str) -> FileEntry:
    """The FileEntry of ``root/relative`` as it is on disk."""
    path = root / check_path(relative)
    st = path.stat()
    return FileEntry(path=relative, sha256=sha256_file(path), size=st.st_size, executable=bool(st.st_mode & 0o111))


def describe_tree(root: pathlib.Path) -> list[FileEntry]:
    """Every regular file under ``root`` (sorted), e.g. a materialised workspace."""
    entries = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            full = pathlib.Path(dirpath) / name
            if full.is_file():
                entries.append(describe_file(root, full.relative_to(root).as_posix()))
    return entries
