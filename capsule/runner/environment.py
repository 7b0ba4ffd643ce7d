"""The training command's environment: the runner's own, minus its secrets, plus the SDK's hooks."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping

from . import observability
from .capsule_file import CapsuleSpec

# Never visible to training code: the ingest token is the runner's alone (its file is deleted
# before the command starts; FORGE_INGEST_TOKEN is never set by an executor, but stays stripped).
SECRET_VARIABLES = ("FORGE_INGEST_TOKEN", "FORGE_INGEST_TOKEN_FILE")
# The job's own PEX_* variables, which bootstrap.sh set aside so that they reach the training
# command and not runner.pex (bootstrap.sh says why). Only PEX_* come back this way: nothing
# else (a FORGE_* the runner strips) can be brought back under this prefix.
SET_ASIDE = "FORGE_JOB_ENV_"
SET_ASIDE_PEX = SET_ASIDE + "PEX_"


def training_env(
    environ: Mapping[str, str],
    *,
    spec: CapsuleSpec,
    capsule_dir: pathlib.Path,
    report_socket: str,
    config_path: pathlib.Path,
) -> dict[str, str]:
    env = {
        key: value
        for key, value in environ.items()
        # PEX and _PEX_* are set by the pex runtime for the runner itself (its cache lock, its
        # path); a pex started by training code must not inherit them.
        if key not in SECRET_VARIABLES and key != "PEX" and not key.startswith("_PEX_")
    }
    for key in [k for k in env if k.startswith(SET_ASIDE_PEX)]:
        env[key.removeprefix(SET_ASIDE)] = env.pop(key)
    env["FORGE_REPORT_SOCKET"] = report_socket
    env["FORGE_CONFIG"] = str(config_path)
    env.setdefault("FORGE_JOB_ID", spec.job_id)
    env.setdefault("FORGE_ATTEMPT_ID", spec.attempt_id)
    env.setdefault("FORGE_ATTEMPT_NUMBER", str(spec.attempt_number))
    # Python writes to a pipe in 4 KiB blocks; users expect their prints in the log as they happen.
    env.setdefault("PYTHONUNBUFFERED", "1")
    if spec.run.observability == "external":
        env.update(observability.job_variables(spec.run.observability_url, spec.run.observability_tool))
    if spec.run.observability == "platform":
        sdk = str(capsule_dir / "sdk")
        current = env.get("PYTHONPATH", "")
        env["PYTHONPATH"] = sdk + (os.pathsep + current if current else "")
    return env
