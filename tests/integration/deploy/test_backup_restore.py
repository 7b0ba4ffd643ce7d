"""A console's backup restores into a fresh state dir and database (SQLite and PostgreSQL).

What docs/deploy.md says to back up, taken while the console serves: the ledger (SQLite's
online backup API, as `sqlite3 ledger.db ".backup ..."` does; `pg_dump -Fc` on PostgreSQL), the blob
store (a copy), the secrets key file and the state dir's admin-token. Restored into a fresh state
dir (and a fresh database), a console sees the jobs with their logs and metrics, serves the
workspace blobs, and a job re-submitted from the restored spec runs from the restored blobs with
its secret unsealed by the restored key.
"""

from __future__ import annotations

import hashlib
import pathlib
import shutil
import sqlite3
import subprocess

import pytest
from starforge_api.control.v1 import blob_service_pb2 as blob
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.control.v1 import secret_service_pb2 as sec
from starforge_api.control.v1 import secret_service_pb2_grpc as sec_grpc
from starforge_api.job.v1 import job_spec_pb2
from starforge_api.job.v1 import job_state_pb2 as st

from control.secrets import create_key_file
from tests.db import create_pg_database, drop_pg_database
from tests.integration.console import Console, console

STEPS = 5
SECRET_VALUE = "restored-secret-value-0123"
TRAIN = f"""#!/usr/bin/env bash
if [ "$BACKUP_CHECK" = "{SECRET_VALUE}" ]; then echo "secret ok"; else echo "secret missing"; exit 3; fi
python3 - <<'PY'
import starforge
for step in range(1, {STEPS} + 1):
    starforge.report(step=step, loss=1.0 / step)
    print(f"line {{step}}", flush=True)
PY
"""


def _pg_cli_url(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


def backup(c: Console, key: pathlib.Path, dest: pathlib.Path) -> None:
    """The backup, taken while `c` serves."""
    cfg = c.app.ctx.cfg
    dest.mkdir(parents=True)
    if cfg.database_url:  # PostgreSQL: a consistent dump, whatever runs meanwhile
        subprocess.run(
            [
                "pg_dump",
                "--format=custom",
                "--no-owner",
                "--file",
                str(dest / "ledger.dump"),
                _pg_cli_url(cfg.database_url),
            ],
            check=True,
            capture_output=True,
        )
    else:  # SQLite: the online backup API (a plain copy of a WAL database can be torn)
        source = sqlite3.connect(cfg.resolved_state_dir / "ledger.db")
        target = sqlite3.connect(dest / "ledger.db")
        with target:
            source.backup(target)
        source.close()
        target.close()
    # Blobs are content-addressed and never change once written: a copy taken after the database
    # dump holds every blob the dump references.
    shutil.copytree(cfg.resolved_blob_dir, dest / "blobs")
    shutil.copy2(key, dest / "secrets.key")
    shutil.copy2(cfg.resolved_state_dir / "admin-token", dest / "admin-token")


def restore(src: pathlib.Path, state_dir: pathlib.Path, database_url: str) -> None:
    """Into a fresh state dir (and, for PostgreSQL, the fresh database `database_url`)."""
    state_dir.mkdir(parents=True)
    if database_url:
        subprocess.run(
            [
                "pg_restore",
                "--no-owner",
                "--exit-on-error",
                "--dbname",
                _pg_cli_url(database_url),
                str(src / "ledger.dump"),
            ],
            check=True,
            capture_output=True,
        )
    else:
        shutil.copy2(src / "ledger.db", state_dir / "ledger.db")
    shutil.copytree(src / "blobs", state_dir / "blobs")
    shutil.copy2(src / "admin-token", state_dir / "admin-token")
    shutil.copy2(src / "secrets.key", state_dir.parent / "secrets.key")


async def _metric_steps(c: Console, job_id: str) -> list[int]:
    r = await c.jobs.GetJobMetrics(ctl.GetJobMetricsRequest(job_id=job_id, names=["loss"]), metadata=c.md)
    return [p.step for s in r.series for p in s.points]


async def _read_blob(c: Console, digest: str) -> bytes:
    return b"".join([r.data async for r in c.blobs.ReadBlob(blob.ReadBlobRequest(digest=digest), metadata=c.md)])


@pytest.mark.slow
async def test_a_backup_restores_jobs_logs_metrics_blobs_and_secrets(tmp_path: pathlib.Path, ledger: str) -> None:
    key = tmp_path / "a" / "secrets.key"
    create_key_file(key)
    async with console(tmp_path / "a", secrets_key_file=key, hf_precheck=False) as c:
        await sec_grpc.SecretServiceStub(c.channel).SetSecret(
            sec.SetSecretRequest(name="BACKUP_CHECK", value=SECRET_VALUE), metadata=c.md
        )
        job = await c.submit_custom(TRAIN, secrets=[job_spec_pb2.SecretRef(name="BACKUP_CHECK")])
        done = await c.wait(job.job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=120)
        assert done.state == st.JOB_STATE_SUCCEEDED, done.diagnosis
        logs = await c.logs(job.job_id)
        assert "secret ok" in logs
        assert await _metric_steps(c, job.job_id) == list(range(1, STEPS + 1))
        backup(c, key, tmp_path / "backup")

    restored_url = create_pg_database() if ledger == "postgres" else ""
    try:
        state_dir = tmp_path / "b" / "console"
        restore(tmp_path / "backup", state_dir, restored_url)
        async with console(
            tmp_path / "b",
            database_url=restored_url,
            secrets_key_file=tmp_path / "b" / "secrets.key",
            hf_precheck=False,
        ) as r:
            assert r.app.ctx.cfg.resolved_state_dir == state_dir.resolve()
            back = await r.get(job.job_id)
            assert back.state == st.JOB_STATE_SUCCEEDED
            assert back.spec == done.spec
            assert await r.logs(job.job_id) == logs
            assert await _metric_steps(r, job.job_id) == list(range(1, STEPS + 1))
            for f in back.spec.workspace.files:  # the workspace, from the restored blob store
                data = await _read_blob(r, f.sha256)
                assert hashlib.sha256(data).hexdigest() == f.sha256
            # the restored spec runs again: its blobs fetched from the restored store, its secret
            # unsealed with the restored key
            again = await r.jobs.SubmitJob(
                ctl.SubmitJobRequest(spec=back.spec, request_id="after-restore"), metadata=r.md
            )
            rerun = await r.wait(again.job.job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=120)
            assert rerun.state == st.JOB_STATE_SUCCEEDED, rerun.diagnosis
            assert "secret ok" in await r.logs(again.job.job_id)
            assert await _metric_steps(r, again.job.job_id) == list(range(1, STEPS + 1))
    finally:
        if restored_url:
            drop_pg_database(restored_url)
