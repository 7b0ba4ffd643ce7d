"""The capsule's environment (docs/ARCHITECTURE.md, "The capsule"), built from a LaunchRequest.

Shared by every executor kind (local, slurm), so the variables and their precedence are defined once.

The request's `env` and `secret_env` come first; the executor's own FORGE_* variables are set
last so a request can never point FORGE_OUT_DIR (or any other path the executor owns) elsewhere.
Paths are those the capsule sees: host paths for the process runtime, mount points for docker,
shared-file-system paths for Slurm.

PEX_ROOT is the runner's, never the job's: runner.pex unpacks pex's bootstrap and its own code
under PEX_ROOT and runs it from there, so a PEX_ROOT the job chose (one that other tenants' jobs
choose too, like `/tmp/pex`) would let one job plant the code another job's runner runs with its
run token. The runner's is `extra`'s (the executor's choice) or the attempt's scratch dir; the
job's own value travels as FORGE_JOB_ENV_PEX_ROOT and the runner gives it back to the training
command (capsule/runner/environment.py), as bootstrap.sh does for the job's other PEX_*.

The run token is never in this environment: a process's environment stays readable by every
process of the same user (/proc/<pid>/environ), the training command's included. The executor
writes it with `write_token_file` into the attempt's scratch directory (mode 0600) and passes only
the file's path, FORGE_INGEST_TOKEN_FILE; the runner makes itself non-dumpable, reads the file and
deletes it before the training command starts (capsule/runner/secrecy.py).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from starforge_api.executor.v1 import launch_request_pb2 as lr_pb

# What a process-runtime capsule inherits from the executor's own environment. Nothing else does:
# the executor's environment holds its token and the control plane's settings.
INHERITED = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "USER", "LOGNAME", "TMPDIR")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Where a job's own PEX_ROOT travels to its training command (module docstring).
JOBS_PEX_ROOT = "FORGE_JOB_ENV_PEX_ROOT"
# The run token's file in the attempt's scratch directory (the runner deletes it when it starts).
TOKEN_FILE = ".forge-ingest-token"  # noqa: S105 - a file name, not a token


@dataclass(frozen=True)
class CapsulePaths:
    """Where the capsule finds its directories."""

    capsule: str
    workspace: str
    out: str
    scratch: str
    datasets: str


def inherited_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The small part of the executor's environment a child process needs (PATH, HOME, locale)."""
    environ = os.environ if environ is None else environ
    env = {k: environ[k] for k in INHERITED if k in environ}
    env.setdefault("PATH", DEFAULT_PATH)
    return env


def capsule_env(
    request: lr_pb.LaunchRequest,
    paths: CapsulePaths,
    *,
    stop_grace_seconds: float,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Environment of `sh bootstrap.sh`: request env, secrets, datasets, `extra`, then FORGE_*."""
    env = dict(request.env)
    env.update(request.secret_env)
    env.update(dataset_env(request.datasets, paths.datasets))
    jobs_pex_root = env.pop("PEX_ROOT", None)
    env.update(extra or {})
    env.setdefault("PEX_ROOT", f"{paths.scratch}/.pex")
    if jobs_pex_root is not None:
        env[JOBS_PEX_ROOT] = jobs_pex_root
    env.update(
        {
            "FORGE_CAPSULE_DIR": paths.capsule,
            "FORGE_CAPSULE_SHA256": request.capsule.capsule_digest,
            "FORGE_WORKSPACE_DIR": paths.workspace,
            "FORGE_OUT_DIR": paths.out,
            "FORGE_SCRATCH_DIR": paths.scratch,
            "FORGE_INGEST_ADDR": request.ingest.address,
            "FORGE_INGEST_CA_PEM": request.ingest.ca_pem,
            "FORGE_INGEST_TOKEN_FILE": f"{paths.scratch}/{TOKEN_FILE}",
            "FORGE_JOB_ID": request.job_id,
            "FORGE_ATTEMPT_ID": request.attempt_id,
            "FORGE_ATTEMPT_NUMBER": str(request.attempt_number),
            "FORGE_RESUME": "1" if request.resume else "0",
            "FORGE_STOP_GRACE_SECONDS": str(int(stop_grace_seconds)),
        }
    )
    return env


_NOT_ALNUM = re.compile(r"[^A-Za-z0-9]")


def dataset_variable(ref: str) -> str:
    """`<NAME>_DATA_DIR` of dataset `<owner>/<name>[@version]`: the name upper-cased, every
    character but A-Z/0-9 turned into `_`, and a leading digit prefixed with `_`."""
    name = ref.split("@", 1)[0].rsplit("/", 1)[-1]
    var = _NOT_ALNUM.sub("_", name).upper()
    return ("_" + var if var[:1].isdigit() else var) + "_DATA_DIR"


def dataset_env(datasets: Iterable[lr_pb.ResolvedDataset], root: str) -> dict[str, str]:
    """Where each mounted dataset is: `<ROLE>_DATA_DIR` by role (TRAIN_DATA_DIR, VALIDATION_DATA_DIR,
    the mount's own name) and `<NAME>_DATA_DIR` by the dataset's name (docs/recipes.md).

    On a clash the role wins: a name variable equal to a role variable is not set. A name variable
    that two different datasets would set (alice/rows and bob/rows, or two versions of one) is not
    set either, since neither is the right answer; the role variables still say where each is."""
    datasets = list(datasets)
    env = {f"{ds.name.upper()}_DATA_DIR": f"{root}/{ds.name}" for ds in datasets}
    by_name: dict[str, set[str]] = {}
    first: dict[str, str] = {}
    for ds in datasets:
        var = dataset_variable(ds.ref)
        by_name.setdefault(var, set()).add(ds.ref)
        first.setdefault(var, f"{root}/{ds.name}")
    for var, refs in by_name.items():
        if var not in env and len(refs) == 1:
            env[var] = first[var]
    return env


def write_token_file(
    request: lr_pb.LaunchRequest, scratch: Path, *, uid: int | None = None, gid: int | None = None
) -> Path:
    """Write the attempt's run token to `scratch`/TOKEN_FILE (host path), readable by its owner
    only: the executor's user, or `uid`/`gid` when the capsule runs as another user.

    O_EXCL after removing any old file: a file (or link) planted there is replaced, never written
    through."""
    path = scratch / TOKEN_FILE
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        if uid is not None or gid is not None:
            os.fchown(fd, -1 if uid is None else uid, -1 if gid is None else gid)
        os.write(fd, request.ingest.token.encode())
    finally:
        os.close(fd)
    return path


def stop_grace(request: lr_pb.LaunchRequest, default: float) -> float:
    """Seconds between SIGTERM and SIGKILL for this attempt."""
    return float(request.stop_grace_seconds) if request.stop_grace_seconds > 0 else default
