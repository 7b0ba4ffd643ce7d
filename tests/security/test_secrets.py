"""Secrets against a hostile tenant: another user (their own personal token) and the code inside a
job (its run token) cannot read, list, change or use someone's secret; a value reaches only the
environment of the job that names it, shows as *** in its logs, and is stored nowhere in clear.

Everything runs against a real console (control plane + `starforge-executor --kind local` process,
process runtime) through the real `sf` binary or the gRPC API.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

import grpc
import pytest
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.control.v1 import secret_service_pb2 as sec
from starforge_api.control.v1 import secret_service_pb2_grpc as sec_grpc
from starforge_api.job.v1 import job_spec_pb2
from starforge_api.job.v1 import job_state_pb2 as st

from common.channel import bearer
from common.config import ConfigError
from control import auth
from control.app import start_control
from control.secrets import create_key_file
from tests.db import create_pg_database, drop_pg_database
from tests.security.secrets_support import (
    PLATFORM_HF_TOKEN,
    add_user,
    lab_as,
    logs_as,
    scan_postgres,
    scan_tree,
    secrets_console,
    sf_async,
    sha256_hex,
    submit_as,
)

WANDB = "wandb-Alice-0f9e8d7c6b5a4f3e2d1c"
PROJECT_HF = "hf_AliceProjectToken_5a6b7c8d9e0f1a2b"
PRINTS = """#!/usr/bin/env bash
echo "wandb=$MY_WANDB"
echo "hf=${HF_TOKEN:-none}"
printf %s "$MY_WANDB" | sha256sum | cut -c1-64 | sed 's/^/wandb-sha=/'
printf %s "${HF_TOKEN:-}" | sha256sum | cut -c1-64 | sed 's/^/hf-sha=/'
"""


async def _refused(call, code: grpc.StatusCode, text: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await call
    assert e.value.code() == code, e.value
    assert text in (e.value.details() or ""), e.value.details()


async def test_a_secret_is_private_to_its_owner_and_masked_in_their_job(tmp_path: pathlib.Path) -> None:
    async with secrets_console(tmp_path) as c:
        alice = await add_user(c, "alice")
        bob = await add_user(c, "bob")

        # set from stdin: the value is in no argument and never printed back
        r = await sf_async(c, alice, "secret", "set", "WANDB_KEY", stdin=WANDB + "\n")
        assert "created secret WANDB_KEY (user alice)" in r.stdout + r.stderr
        assert WANDB not in r.stdout + r.stderr
        # a value on the command line is refused (it would sit in shell history and `ps`)
        r = await sf_async(c, alice, "secret", "set", "OTHER", WANDB, check=False)
        assert r.returncode == 2 and WANDB not in r.stdout + r.stderr
        for args in (("secret", "ls"), ("-o", "json", "secret", "ls")):
            r = await sf_async(c, alice, *args)
            assert "WANDB_KEY" in r.stdout and WANDB not in r.stdout + r.stderr
            assert "OTHER" not in r.stdout

        # bob sees nothing of it, cannot touch it, and cannot reach alice's project scope
        r = await sf_async(c, bob, "secret", "ls")
        assert "WANDB_KEY" not in r.stdout
        r = await sf_async(c, bob, "secret", "ls", "--project", "@alice/lab", check=False)
        assert r.returncode != 0 and "belongs to @alice" in r.stderr
        r = await sf_async(c, bob, "secret", "set", "WANDB_KEY", "--project", "@alice/lab", stdin="x" * 8, check=False)
        assert r.returncode != 0 and "belongs to @alice" in r.stderr
        r = await sf_async(c, bob, "secret", "rm", "WANDB_KEY", check=False)
        assert r.returncode != 0 and "not found" in r.stderr
        # bob setting his own WANDB_KEY creates his secret; alice's stays hers
        await sf_async(c, bob, "secret", "set", "BOB_KEY", stdin="bob-value-123456")

        # bob's job naming alice's secret is refused at submit, with his own names as hints
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await submit_as(c, bob, "bob", PRINTS, [job_spec_pb2.SecretRef(name="WANDB_KEY", env="MY_WANDB")])
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "secret WANDB_KEY does not exist for you or project @bob/lab" in (e.value.details() or "")

        # the code inside alice's own job holds a run token: SecretService refuses it
        def run_token(s):  # type: ignore[no-untyped-def]
            return auth.issue_token(s, "alice", "run", name="probe", job_id="jprobe")[0]

        token = await c.app.ctx.db.run(run_token)
        secrets_api = sec_grpc.SecretServiceStub(c.channel)
        await _refused(
            secrets_api.ListSecrets(sec.ListSecretsRequest(), metadata=bearer(token)),
            grpc.StatusCode.PERMISSION_DENIED,
            "a run token cannot call ListSecrets",
        )
        await _refused(
            secrets_api.SetSecret(sec.SetSecretRequest(name="WANDB_KEY", value="evil-value"), metadata=bearer(token)),
            grpc.StatusCode.PERMISSION_DENIED,
            "a run token cannot call SetSecret",
        )

        # alice's job (the victim) is unaffected: it gets her value under the chosen name, masked in logs
        job = await submit_as(c, alice, "alice", PRINTS, [job_spec_pb2.SecretRef(name="WANDB_KEY", env="MY_WANDB")])
        done = await c.wait(job.job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=120)
        lines = await logs_as(c, alice, job.job_id)
        assert done.state == st.JOB_STATE_SUCCEEDED, lines
        assert "wandb=***" in lines
        assert f"wandb-sha={sha256_hex(WANDB)}" in lines
        assert "hf=none" in lines  # the deployment's HF token is no job's secret
        assert not [line for line in lines if WANDB in line]
        # and bob cannot read its logs
        await _refused(
            c.jobs.GetJob(ctl.GetJobRequest(job_id=job.job_id), metadata=bearer(bob)),
            grpc.StatusCode.NOT_FOUND,
            "not found",
        )


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
async def test_no_secret_value_is_stored_anywhere(tmp_path: pathlib.Path, database: str) -> None:
    """After a run that used a user secret and a project secret, with the platform HF token
    configured: neither value is in the database, the blob store, the log store, the capsule or
    the executor's attempt directories (the whole state of console and executor is scanned)."""
    pg_url = create_pg_database() if database == "postgresql" else ""
    try:
        overrides = {"database_url": pg_url} if pg_url else {}
        async with secrets_console(tmp_path / "state", **overrides) as c:
            alice = await add_user(c, "alice")
            lab = await lab_as(c, alice, PRINTS, {"secrets": [{"name": "HF", "env": "HF_TOKEN"}]})
            await sf_async(c, alice, "secret", "set", "WANDB_KEY", stdin=WANDB)
            value_file = tmp_path / "hf-token.txt"  # outside the scanned state
            value_file.write_text(PROJECT_HF + "\n")
            r = await sf_async(
                c, alice, "secret", "set", "HF", "--project", ".", "--from-file", str(value_file), cwd=lab
            )
            assert "created secret HF (project @alice/lab)" in r.stdout + r.stderr
            r = await sf_async(c, alice, "-o", "json", "submit", "exp", "--secret", "WANDB_KEY=MY_WANDB", cwd=lab)
            job_id = json.loads(r.stdout)["job"]["job_id"]
            done = await c.wait(job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=120)
            lines = await logs_as(c, alice, job_id)
            assert done.state == st.JOB_STATE_SUCCEEDED, lines
            assert {"wandb=***", "hf=***", f"wandb-sha={sha256_hex(WANDB)}", f"hf-sha={sha256_hex(PROJECT_HF)}"} <= set(
                lines
            ), lines
            secret_values = [WANDB, PROJECT_HF, PLATFORM_HF_TOKEN]
            found = scan_tree(tmp_path / "state", secret_values)
            if pg_url:
                found += scan_postgres(pg_url, secret_values)
            assert found == [], found
    finally:
        if pg_url:
            drop_pg_database(pg_url)


async def test_console_refuses_to_start_with_secrets_it_cannot_open(tmp_path: pathlib.Path) -> None:
    async with secrets_console(tmp_path) as c:
        alice = await add_user(c, "alice")
        await sf_async(c, alice, "secret", "set", "WANDB_KEY", stdin=WANDB)
        cfg = c.app.ctx.cfg
    assert cfg.secrets_key_file is not None
    bare = dataclasses.replace(cfg, fleets=[], listen="127.0.0.1:0")
    with pytest.raises(ConfigError, match=r"holds 1 secret\(s\) but the console has no secrets_key_file"):
        await start_control(dataclasses.replace(bare, secrets_key_file=None))
    other = tmp_path / "other.key"
    create_key_file(other)
    with pytest.raises(ConfigError, match="sealed with a key other than"):
        await start_control(dataclasses.replace(bare, secrets_key_file=other))
    # rotation: the old key as secrets_old_key_files, a new current key; rows are re-sealed
    app = await start_control(
        dataclasses.replace(bare, secrets_key_file=other, secrets_old_key_files=[cfg.secrets_key_file])
    )
    await app.stop(0)
    app = await start_control(dataclasses.replace(bare, secrets_key_file=other))  # the old key is no longer needed
    await app.stop(0)
