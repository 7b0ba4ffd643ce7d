"""The run token's file: written 0600 by the executor, never through a planted link; read and
deleted by the runner, which is non-dumpable first."""

from __future__ import annotations

import pathlib
import stat
import subprocess
import sys

import pytest
from starforge_api.executor.v1 import launch_request_pb2 as lr

from capsule.runner.errors import RunnerConfigError
from capsule.runner.secrecy import take_token
from executor_svc.capsule_env import TOKEN_FILE, CapsulePaths, capsule_env, write_token_file

REPO = pathlib.Path(__file__).resolve().parents[2]


def request(token: str = "sfr_abcdefghij_secretsecretsecretsecret") -> lr.LaunchRequest:
    return lr.LaunchRequest(attempt_id="j1.1", job_id="j1", ingest=lr.IngestTarget(address="127.0.0.1:1", token=token))


def test_the_token_is_a_0600_file_and_in_no_environment(tmp_path: pathlib.Path) -> None:
    path = write_token_file(request(), tmp_path)
    assert path == tmp_path / TOKEN_FILE
    assert path.read_text() == request().ingest.token
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    paths = CapsulePaths("/c", "/w", "/o", "/s", "/s/datasets")
    env = capsule_env(request(), paths, stop_grace_seconds=5)
    assert env["FORGE_INGEST_TOKEN_FILE"] == f"/s/{TOKEN_FILE}"
    assert "FORGE_INGEST_TOKEN" not in env
    assert request().ingest.token not in "\n".join(env.values())


def test_a_planted_link_is_replaced_not_written_through(tmp_path: pathlib.Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / TOKEN_FILE).symlink_to(victim)
    write_token_file(request(), scratch)
    assert victim.read_text() == "keep"
    assert not (scratch / TOKEN_FILE).is_symlink()


def test_the_runner_takes_the_token_and_deletes_the_file(tmp_path: pathlib.Path) -> None:
    path = write_token_file(request("sfr_x_token"), tmp_path)
    assert take_token(path) == "sfr_x_token"
    assert not path.exists()
    with pytest.raises(RunnerConfigError, match="cannot read the run token file"):
        take_token(path)


def test_the_runner_makes_itself_non_dumpable() -> None:
    code = (
        "import ctypes; from capsule.runner.secrecy import make_undumpable; "
        "print(make_undumpable(), ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))"  # 3: PR_GET_DUMPABLE
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "0"]


def test_the_jobs_pex_root_is_its_commands_and_the_runner_keeps_the_executors() -> None:
    """runner.pex runs code from under PEX_ROOT, so a PEX_ROOT the job chose (shared with other
    tenants' jobs) is never the runner's: it travels to the command as FORGE_JOB_ENV_PEX_ROOT."""
    paths = CapsulePaths("/c", "/w", "/o", "/s", "/s/datasets")
    asked = lr.LaunchRequest(
        attempt_id="j1.1", job_id="j1", env={"PEX_ROOT": "/tmp/pex", "FORGE_JOB_ENV_PEX_ROOT": "/x"}
    )
    env = capsule_env(asked, paths, stop_grace_seconds=5)
    assert (env["PEX_ROOT"], env["FORGE_JOB_ENV_PEX_ROOT"]) == ("/s/.pex", "/tmp/pex")
    env = capsule_env(asked, paths, stop_grace_seconds=5, extra={"PEX_ROOT": "/node/pex"})
    assert (env["PEX_ROOT"], env["FORGE_JOB_ENV_PEX_ROOT"]) == ("/node/pex", "/tmp/pex")
    env = capsule_env(request(), paths, stop_grace_seconds=5)
    assert env["PEX_ROOT"] == "/s/.pex" and "FORGE_JOB_ENV_PEX_ROOT" not in env
