"""Platform datasets: versioned `<owner>/<name>@<version>`, immutable, content in the blob store.

At job start a dataset version is materialised by the executor into its node cache (shared by
every job that mounts it) and `<NAME>_DATA_DIR` points at it; `--train-dataset alice/gsm8k@v2
--train-data train.parquet` names a file inside it.
"""

from __future__ import annotations

import re
import time

from sqlalchemy import func, select
from sqlalchemy.orm import Session
from starforge_api.control.v1 import dataset_service_pb2 as pb
from starforge_api.control.v1 import error_reason_pb2 as er
from starforge_api.executor.v1 import launch_request_pb2 as lr
from starforge_api.job.v1 import job_spec_pb2, workspace_pb2

from common import errors
from common.sensitive import bad_path
from control import blob_access
from control.auth import Principal
from control.blobstore import BlobStore
from control.db import models as m
from control.ledger.convert import ts

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")
VERSION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
REF_RE = re.compile(
    r"^(?P<owner>[a-z][a-z0-9-]{1,31})/(?P<name>[a-z0-9][a-z0-9._-]{0,99})(?:@(?P<version>[A-Za-z0-9][A-Za-z0-9._-]{0,63}))?$"
)


def parse_ref(ref: str, field: str = "ref") -> tuple[str, str, str]:
    """("alice", "gsm8k-zh", "v2") for "alice/gsm8k-zh@v2"; version "" when absent."""
    m_ = REF_RE.match(ref)
    if m_ is None:
        raise errors.InvalidArgument(
            f"dataset reference {ref!r} is not valid: use <owner>/<name>[@version], e.g. alice/gsm8k-zh@v2",
            field_violations=(errors.FieldViolation(field, "expected <owner>/<name>[@version]"),),
        )
    return m_.group("owner"), m_.group("name"), m_.group("version") or ""


def _proto(row: m.Dataset, versions: list[str], with_manifest: bool) -> pb.Dataset:
    d = pb.Dataset(owner=row.owner, name=row.name, version=row.version, description=row.description, versions=versions)
    if with_manifest:
        d.manifest.ParseFromString(row.manifest)
    stamp = ts(row.created_at)
    if stamp is not None:
        d.create_time.CopyFrom(stamp)
    return d


def _versions(s: Session, owner: str, name: str) -> list[m.Dataset]:
    return list(
        s.scalars(select(m.Dataset).where(m.Dataset.owner == owner, m.Dataset.name == name).order_by(m.Dataset.number))
    )


def push(
    s: Session,
    p: Principal,
    store: BlobStore,
    name: str,
    version: str,
    manifest: workspace_pb2.WorkspaceManifest,
    description: str,
) -> pb.Dataset:
    if not NAME_RE.match(name):
        raise errors.InvalidArgument(f"dataset name {name!r} is not valid: use a-z, 0-9, '.', '_', '-'")
    if version and not VERSION_RE.match(version):
        raise errors.InvalidArgument(f"dataset version {version!r} is not valid")
    if not manifest.files:
        raise errors.InvalidArgument("a dataset needs at least one file")
    for f in manifest.files:
        why = bad_path(f.path)
        if why:
            raise errors.InvalidArgument(f"dataset path {f.path!r} {why}")
    missing = store.missing(sorted({f.sha256 for f in manifest.files}))
    if missing:
        raise errors.FailedPrecondition(
            f"{len(missing)} dataset file(s) were not uploaded; push again with sf", reason=er.ERROR_REASON_MISSING_BLOB
        )
    # Only content the pusher may read can be published (then every user may read it).
    blob_access.require_readable(s, p, (f.sha256 for f in manifest.files), "dataset")
    existing = _versions(s, p.user, name)
    files: list[workspace_pb2.WorkspaceFile] = sorted(manifest.files, key=lambda f: f.path)
    canonical = workspace_pb2.WorkspaceManifest(files=files)
    canonical.total_bytes = sum(f.size for f in manifest.files)
    data = canonical.SerializeToString(deterministic=True)
    version = version or f"v{len(existing) + 1}"
    for row in existing:
        if row.version == version:
            if row.manifest == data:
                return _proto(row, [r.version for r in existing], True)
            raise errors.AlreadyExists(
                f"dataset {p.user}/{name}@{version} exists with other content; versions are immutable, push a new one"
            )
    number = (
        s.scalar(select(func.max(m.Dataset.number)).where(m.Dataset.owner == p.user, m.Dataset.name == name)) or 0
    ) + 1
    row = m.Dataset(
        owner=p.user,
        name=name,
        version=version,
        number=number,
        manifest=data,
        description=description,
        created_at=time.time(),
    )
    s.add(row)
    s.flush()
    blob_access.record(s, blob_access.PUBLIC, (f.sha256 for f in manifest.files))
    return _proto(row, [r.version for r in existing] + [version], True)


def resolve(s: Session, ref: str, field: str = "ref") -> tuple[m.Dataset, list[str]]:
    """The dataset version `ref` names; `field` is the request field that holds it (for BadRequest)."""
    owner, name, version = parse_ref(ref, field)
    rows = _versions(s, owner, name)
    if not rows:
        raise errors.NotFound(f"dataset {owner}/{name} not found (see `sf dataset ls`)")
    if not version:
        return rows[-1], [r.version for r in rows]
    for row in rows:
        if row.version == version:
            return row, [r.version for r in rows]
    raise errors.NotFound(
        f"dataset {owner}/{name} has no version {version}; versions: {', '.join(r.version for r in rows)}"
    )


def get(s: Session, ref: str) -> pb.Dataset:
    row, versions = resolve(s, ref)
    return _proto(row, versions, True)


def list_datasets(s: Session, owner: str) -> list[pb.Dataset]:
    stmt = select(m.Dataset).order_by(m.Dataset.owner, m.Dataset.name, m.Dataset.number)
    if owner:
        stmt = stmt.where(m.Dataset.owner == owner)
    latest: dict[tuple[str, str], tuple[m.Dataset, list[str]]] = {}
    for row in s.scalars(stmt):
        prev = latest.get((row.owner, row.name))
        versions = ([*prev[1]] if prev else []) + [row.version]
        latest[(row.owner, row.name)] = (row, versions)
    return [_proto(row, versions, False) for row, versions in latest.values()]


def mounts(spec: job_spec_pb2.JobSpec) -> list[tuple[str, str]]:
    """(mount name, ref) of every dataset a spec uses: --train-dataset is "train",
    a validation dataset "validation", plus spec.datasets."""
    out = []
    if spec.train_data.dataset:
        out.append(("train", spec.train_data.dataset))
    if spec.validation_data.dataset:
        out.append(("validation", spec.validation_data.dataset))
    out += [(d.name, d.ref) for d in spec.datasets]
    return out


def with_config_inputs(spec: job_spec_pb2.JobSpec, config: dict[str, object]) -> job_spec_pb2.JobSpec:
    """A copy of `spec` with config.yaml's `model:` and `data:` filled in where the spec gives none
    (no ledger read: `pin` then resolves the datasets it names)."""
    pinned = job_spec_pb2.JobSpec()
    pinned.CopyFrom(spec)
    if not pinned.model and isinstance(config.get("model"), str):
        pinned.model = str(config["model"])
    data = config.get("data")
    if isinstance(data, dict):
        for key, ref in (("train", pinned.train_data), ("validation", pinned.validation_data)):
            section = data.get(key)
            if isinstance(section, str) and not ref.path and not ref.dataset:
                ref.path = section
            elif isinstance(section, dict):
                if not ref.dataset and section.get("dataset"):
                    ref.dataset = str(section["dataset"])
                if not ref.path and section.get("path"):
                    ref.path = str(section["path"])
    return pinned


def pin(s: Session, spec: job_spec_pb2.JobSpec, config: dict[str, object]) -> job_spec_pb2.JobSpec:
    """A copy of `spec` whose dataset references carry resolved versions (the job always reads the
    version that existed at submit), after checking that every named file is in its dataset.
    config.yaml's `model:` and `data: {train:, validation:}` (a path, or {dataset:, path:}) stand in
    for --model / --train-data / --train-dataset / --validation-data when those are not given
    (`with_config_inputs`)."""
    pinned = with_config_inputs(spec, config)
    names = set()
    for which, ref_msg in (("train_data", pinned.train_data), ("validation_data", pinned.validation_data)):
        if not ref_msg.dataset:
            continue
        row, _ = resolve(s, ref_msg.dataset, f"spec.{which}.dataset")
        ref_msg.dataset = f"{row.owner}/{row.name}@{row.version}"
        if ref_msg.path:
            manifest = workspace_pb2.WorkspaceManifest()
            manifest.ParseFromString(row.manifest)
            paths = [f.path for f in manifest.files]
            if ref_msg.path not in paths and not any(p.startswith(ref_msg.path.rstrip("/") + "/") for p in paths):
                shown = ", ".join(paths[:8]) + (" ..." if len(paths) > 8 else "")
                raise errors.InvalidArgument(
                    f"{ref_msg.path} is not in dataset {ref_msg.dataset} (its files: {shown})",
                    reason=er.ERROR_REASON_MISSING_INPUT,
                    field_violations=(errors.FieldViolation(f"spec.{which}.path", "not in the dataset"),),
                )
    for i, mount in enumerate(pinned.datasets):
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]{0,31}$", mount.name) or mount.name in names:
            raise errors.InvalidArgument(
                f"dataset mount name {mount.name!r} is not valid or given twice",
                field_violations=(errors.FieldViolation(f"spec.datasets[{i}].name", "not valid or given twice"),),
            )
        names.add(mount.name)
        row, _ = resolve(s, mount.ref, f"spec.datasets[{i}].ref")
        mount.ref = f"{row.owner}/{row.name}@{row.version}"
    return pinned


def resolved(s: Session, spec: job_spec_pb2.JobSpec) -> list[lr.ResolvedDataset]:
    """The datasets of a (pinned) spec with their manifests, for the LaunchRequest."""
    out = []
    for name, ref in mounts(spec):
        row, _ = resolve(s, ref)
        manifest = workspace_pb2.WorkspaceManifest()
        manifest.ParseFromString(row.manifest)
        out.append(lr.ResolvedDataset(name=name, ref=ref, manifest=manifest))
    return out
