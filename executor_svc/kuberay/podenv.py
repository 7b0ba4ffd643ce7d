"""The capsule's environment in a kuberay pod (docs/ARCHITECTURE.md, "The capsule").

In-pod paths are fixed (/forge/...). The request's `env` and `secret_env` come first, then
`<NAME>_DATA_DIR` for datasets, then the FORGE_* variables, which win, so a request can never
point FORGE_OUT_DIR elsewhere. Values are escaped for Kubernetes' `$(VAR)` expansion.

Sensitive values (the run token, the blob token, `secret_env`) are either plain values (test
servers without a core API) or, with `use_secret_for_token`, `secretKeyRef`s into the attempt's
Secret, whose data is returned alongside. The run token is never in a training container's
environment (Ray's processes and the training code share that container and user, and every
process's environment is readable under /proc): the head pod's fetch init container gets it as
FORGE_INGEST_TOKEN and writes it to FORGE_INGEST_TOKEN_FILE in the scratch emptyDir (0600),
which the runner reads and deletes. Only the head runs the runner; workers get everything
else, so code Ray ships to them sees the same paths.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from starforge_api.executor.v1 import launch_request_pb2 as lr_pb

from common import errors
from common.hashing import is_digest
from executor_svc.bundle import DATASET_NAME
from executor_svc.capsule_env import JOBS_PEX_ROOT, dataset_env
from executor_svc.kuberay.config import KubeRayConfig
from executor_svc.plumbing.paths import check_relative_path

CAPSULE_DIR = "/forge/capsule"
WORKSPACE_DIR = "/forge/workspace"
OUT_DIR = "/forge/out"
SCRATCH_DIR = "/forge/scratch"
DATASETS_DIR = "/forge/datasets"

# Names of environment variables holding tokens (not tokens).
INGEST_TOKEN = "FORGE_INGEST_TOKEN"  # noqa: S105
INGEST_TOKEN_FILE = "FORGE_INGEST_TOKEN_FILE"  # noqa: S105
TOKEN_FILE_PATH = f"{SCRATCH_DIR}/.forge-ingest-token"
BLOB_TOKEN = "FORGE_BLOB_TOKEN"  # noqa: S105
# One environment string may not exceed 128 KiB on Linux (MAX_ARG_STRLEN); stay well below.
MAX_FETCH_FILES_BYTES = 100_000
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


def invalid(message: str, field: str, why: str) -> errors.InvalidArgument:
    return errors.InvalidArgument(message, field_violations=(errors.FieldViolation(field, why),))


def _env_name(name: str, field: str) -> str:
    if not _ENV_NAME.match(name):
        raise invalid(
            f"environment variable name {name[:80]!r} is not valid in a Kubernetes pod",
            field,
            "must match [-._a-zA-Z][-._a-zA-Z0-9]*",
        )
    return name


def _plain(name: str, value: str) -> dict[str, Any]:
    # Kubernetes expands $(VAR) in env values; "$$(" is its escape for a literal "$(".
    return {"name": name, "value": value.replace("$(", "$$(")}


def _from_secret(name: str, secret: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": name}}}


def _fetch_files(request: lr_pb.LaunchRequest) -> str:
    """FORGE_FETCH_FILES: capsule files and dataset files ([root, path, sha256, size, executable])."""
    rows: list[list[Any]] = []
    sources: list[tuple[str, str, Sequence[Any]]] = [("capsule", "capsule.files", request.capsule.files)]
    for i, ds in enumerate(request.datasets):
        if not DATASET_NAME.match(ds.name):
            raise invalid(f"dataset name {ds.name!r} is not an identifier", f"datasets[{i}].name", "not an identifier")
        sources.append((f"datasets/{ds.name}", f"datasets[{i}].manifest.files", ds.manifest.files))
    for root, field, files in sources:
        for j, f in enumerate(files):
            check_relative_path(f.path, f"{field}[{j}].path")
            if not is_digest(f.sha256):
                raise invalid(f"{root}/{f.path}: sha256 is not a digest", f"{field}[{j}].sha256", "not a digest")
            top, _, sub = root.partition("/")
            rows.append([top, f"{sub}/{f.path}" if sub else f.path, f.sha256, f.size, f.executable])
    text = json.dumps(rows, separators=(",", ":"))
    if len(text) > MAX_FETCH_FILES_BYTES:
        raise invalid(
            f"the capsule and dataset file lists take {len(text)} bytes; kuberay passes them to pods in "
            f"an environment variable limited to {MAX_FETCH_FILES_BYTES}: use fewer, larger dataset files",
            "datasets",
            "too many files",
        )
    return text


@dataclass(frozen=True)
class PodEnv:
    """Environment lists for the head and worker containers and the fetch init container."""

    head: list[dict[str, Any]]
    worker: list[dict[str, Any]]
    fetch: list[dict[str, Any]]
    head_fetch: list[dict[str, Any]]  # fetch, plus the run token and where to write it
    secret: dict[str, str] | None


def pod_env(request: lr_pb.LaunchRequest, cfg: KubeRayConfig, secret_name: str, grace: int) -> PodEnv:
    """The capsule environment (request env, secrets, datasets, then FORGE_*, which win)."""
    secret: dict[str, str] | None = {} if cfg.use_secret_for_token else None
    env: dict[str, dict[str, Any]] = {}
    for k, v in request.env.items():
        env[_env_name(k, f"env[{k}]")] = _plain(k, v)

    def sensitive(name: str, value: str) -> dict[str, Any]:
        if secret is None:
            return _plain(name, value)
        secret[name] = value
        return _from_secret(name, secret_name)

    for k, v in request.secret_env.items():
        env[_env_name(k, "secret_env")] = sensitive(k, v)
    for name, path in dataset_env(request.datasets, DATASETS_DIR).items():
        env[name] = _plain(name, path)
    jobs_pex_root = env.pop("PEX_ROOT", None)  # the runner's is the scratch dir's (capsule_env.py)
    if jobs_pex_root is not None:
        env[JOBS_PEX_ROOT] = {**jobs_pex_root, "name": JOBS_PEX_ROOT}
    forge = {
        "FORGE_CAPSULE_DIR": CAPSULE_DIR,
        "FORGE_CAPSULE_SHA256": request.capsule.capsule_digest,
        "FORGE_WORKSPACE_DIR": WORKSPACE_DIR,
        "FORGE_OUT_DIR": OUT_DIR,
        "FORGE_SCRATCH_DIR": SCRATCH_DIR,
        "FORGE_INGEST_ADDR": request.ingest.address,
        "FORGE_INGEST_CA_PEM": request.ingest.ca_pem,
        "FORGE_JOB_ID": request.job_id,
        "FORGE_ATTEMPT_ID": request.attempt_id,
        "FORGE_ATTEMPT_NUMBER": str(request.attempt_number),
        "FORGE_RESUME": "1" if request.resume else "0",
        "FORGE_STOP_GRACE_SECONDS": str(grace),
        "PEX_ROOT": f"{SCRATCH_DIR}/.pex",
        # Ray's job supervisor: SIGTERM to the entrypoint, SIGKILL this many seconds later.
        "RAY_JOB_STOP_WAIT_TIME_S": str(grace),
    }
    for k, v in forge.items():
        env[k] = _plain(k, v)
    worker = list(env.values())
    env[INGEST_TOKEN_FILE] = _plain(INGEST_TOKEN_FILE, TOKEN_FILE_PATH)
    fetch = [
        _plain("FORGE_BLOB_URL", request.blob_source.http_url),
        _plain("FORGE_BLOB_CA_PEM", request.blob_source.ca_pem),
        sensitive(BLOB_TOKEN, request.blob_source.token),
        _plain("FORGE_CAPSULE_SHA256", request.capsule.capsule_digest),
        _plain("FORGE_CAPSULE_DIR", CAPSULE_DIR),
        _plain("FORGE_WORKSPACE_DIR", WORKSPACE_DIR),
        _plain("FORGE_DATASETS_DIR", DATASETS_DIR),
        _plain("FORGE_FETCH_FILES", _fetch_files(request)),
    ]
    head_fetch = [
        *fetch,
        sensitive(INGEST_TOKEN, request.ingest.token),
        _plain(INGEST_TOKEN_FILE, TOKEN_FILE_PATH),
    ]
    return PodEnv(head=list(env.values()), worker=worker, fetch=fetch, head_fetch=head_fetch, secret=secret)
