"""Helpers for the secrets security tests: a console with a secrets key and the platform HF token,
users with their own tokens, the real `sf` run as one of them, and scans of everything at rest."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import os
import pathlib
import subprocess
import sys
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import psycopg
from starforge_api.control.v1 import account_service_pb2 as acc
from starforge_api.control.v1 import account_service_pb2_grpc as acc_grpc
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.job.v1 import job_pb2, job_spec_pb2

from common.channel import bearer
from control.secrets import create_key_file
from tests.integration.console import Console, console, git

PLATFORM_HF_TOKEN = "hf_PlatformDeploymentToken0123456789abcd"


@contextlib.asynccontextmanager
async def secrets_console(root: pathlib.Path, **overrides: Any) -> AsyncIterator[Console]:
    """A console (real control plane + real local executor process) whose secrets key lives in
    `root`, with the deployment's HF token configured as an operator would."""
    key = root / "console-secrets.key"
    create_key_file(key)
    async with console(root, secrets_key_file=key, hf_token=PLATFORM_HF_TOKEN, hf_precheck=False, **overrides) as c:
        yield c


async def add_user(c: Console, name: str) -> str:
    """A normal (non-admin) user; returns their personal access token."""
    accounts = acc_grpc.AccountServiceStub(c.channel)
    resp = await accounts.CreateUser(acc.CreateUserRequest(name=name), metadata=c.md)
    return str(resp.token)


def sf_as(
    c: Console,
    token: str,
    *args: str,
    stdin: str | None = None,
    cwd: pathlib.Path | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """The real `sf` binary as the user owning `token` (stdin given as text, never argv)."""
    env = dict(
        os.environ,
        STARFORGE_CONSOLE=c.address,
        STARFORGE_TOKEN=token,
        STARFORGE_CLIENT_CONFIG=str(c.root / f"client-{hashlib.sha256(token.encode()).hexdigest()[:8]}.yaml"),
    )
    r = subprocess.run(
        [str(pathlib.Path(sys.executable).parent / "sf"), *args],
        cwd=cwd,
        env=env,
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if check and r.returncode != 0:
        raise AssertionError(f"sf {' '.join(args)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
    return r


async def sf_async(c: Console, token: str, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    """`sf_as` in a thread: the in-process control plane keeps serving while sf runs."""
    return await asyncio.to_thread(sf_as, c, token, *args, **kw)


async def lab_as(c: Console, token: str, train_sh: str, config: dict[str, Any], name: str = "lab") -> pathlib.Path:
    """A committed lab of the token's user (project "@<user>/<name>") with experiment `exp`."""
    import yaml

    lab = c.root / f"lab-{name}-{hashlib.sha256(token.encode()).hexdigest()[:6]}"
    await sf_async(c, token, "init", str(lab), "--name", name)
    git(lab, "init", "-q")
    await sf_async(c, token, "new", "exp", "--method", "custom/custom", cwd=lab)
    exp = lab / "experiments" / "exp"
    (exp / "train.sh").write_text(train_sh)
    (exp / "train.sh").chmod(0o755)
    (exp / "config.yaml").write_text(yaml.safe_dump({"image": "host", "observability": "platform", **config}))
    git(lab, "add", "-A")
    git(lab, "commit", "-qm", "lab")
    return lab


async def submit_as(
    c: Console, token: str, user: str, train_sh: str, secrets: Sequence[job_spec_pb2.SecretRef] = ()
) -> job_pb2.Job:
    """Submit a custom/custom job over gRPC as `user` (project "@<user>/lab")."""
    files = {"experiments/exp/train.sh": train_sh.encode()}
    # uploaded as the submitter: a workspace may only name blobs its submitter may read
    manifest = await dataclasses.replace(c, token=token).upload(files, {"experiments/exp/train.sh"})
    spec = job_spec_pb2.JobSpec(
        api_version="forge/v2",
        project=f"@{user}/lab",
        experiment="exp",
        method="custom/custom",
        recipe_lock=await c.lock(),
        config_json=json.dumps({"image": "host", "observability": "platform"}),
        workspace=manifest,
        secrets=list(secrets),
    )
    r = await c.jobs.SubmitJob(ctl.SubmitJobRequest(spec=spec), metadata=bearer(token))
    job: job_pb2.Job = r.job
    return job


async def logs_as(c: Console, token: str, job_id: str) -> list[str]:
    out: list[str] = []
    async for r in c.jobs.StreamJobLogs(ctl.StreamJobLogsRequest(job_id=job_id), metadata=bearer(token)):
        out.extend(line.text for line in r.lines)
    return out


def sha256_hex(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def needles_of(values: Iterable[str]) -> dict[str, bytes]:
    """Each value as the bytes a store could hold it in (UTF-8 as is)."""
    return {v: v.encode() for v in values}


def scan_tree(root: pathlib.Path, values: Iterable[str]) -> list[str]:
    """Every file under `root` (databases, WAL, blob store, executor attempt dirs, logs) holding a value."""
    needles = needles_of(values)
    found = []
    # os.walk, not rglob: the executor may be removing a finished attempt's directories while they
    # are walked, and os.walk skips a directory that is gone (as the read below skips such a file)
    paths = [pathlib.Path(folder, name) for folder, _, names in os.walk(root) for name in names]
    for path in sorted(paths):
        if not path.is_file() or path.is_symlink():
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        found += [f"{path}: {name[:6]}..." for name, needle in needles.items() if needle in data]
    return found


def scan_postgres(url: str, values: Iterable[str]) -> list[str]:
    """Every text and bytea column of every table of the database at `url` holding a value."""
    needles = needles_of(values)
    dsn = url.replace("postgresql+psycopg://", "postgresql://")
    found = []
    with psycopg.connect(dsn) as conn:
        columns = conn.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = 'public' AND data_type IN ('text', 'character varying', 'bytea', 'json', 'jsonb')"
        ).fetchall()
        for table, column, kind in columns:
            for (cell,) in conn.execute(f'SELECT "{column}" FROM "{table}"'):
                data = bytes(cell) if kind == "bytea" and cell is not None else str(cell or "").encode()
                found += [f"{table}.{column}: {name[:6]}..." for name, needle in needles.items() if needle in data]
    return found
