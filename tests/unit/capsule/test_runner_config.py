"""The runner's settings, the training environment it builds, and the custom adapter's checks."""

from __future__ import annotations

import os
import pathlib

import pytest

from capsule.runner.adapters import AdapterContext, get_adapter
from capsule.runner.address import parse_address
from capsule.runner.capsule_file import CapsuleSpec, RunSpec
from capsule.runner.environment import training_env
from capsule.runner.errors import PrecheckError, RunnerConfigError
from capsule.runner.process import exit_status
from capsule.runner.settings import RunnerSettings
from capsule.wheelhouse import BuildError, Pin, check_pure, parse_requirements

BASE = {
    "FORGE_CAPSULE_DIR": "/c",
    "FORGE_WORKSPACE_DIR": "/w",
    "FORGE_SCRATCH_DIR": "/s",
    "FORGE_INGEST_ADDR": "127.0.0.1:7070",
    "FORGE_INGEST_TOKEN_FILE": "/s/.forge-ingest-token",
}


def spec(**run: object) -> CapsuleSpec:
    fields: dict[str, object] = {
        "method": "custom/custom",
        "adapter": "custom",
        "experiment": "demo",
        "entrypoint": "experiments/demo/train.sh",
    }
    fields.update(run)
    return CapsuleSpec("j1", "j1.2", 2, "runner-0123456789abcdef.pex", RunSpec(**fields))  # type: ignore[arg-type]


def test_settings_defaults_and_validation() -> None:
    settings = RunnerSettings.from_environ(BASE)
    assert (settings.drain_seconds, settings.stop_grace_seconds) == (120.0, 10.0)
    assert RunnerSettings.from_environ(BASE | {"FORGE_INGEST_DRAIN_SECONDS": "5"}).drain_seconds == 5.0
    with pytest.raises(RunnerConfigError, match="FORGE_SCRATCH_DIR"):
        RunnerSettings.from_environ({k: v for k, v in BASE.items() if k != "FORGE_SCRATCH_DIR"})
    with pytest.raises(RunnerConfigError, match="FORGE_STOP_GRACE_SECONDS"):
        RunnerSettings.from_environ(BASE | {"FORGE_STOP_GRACE_SECONDS": "soon"})


def test_ingest_address_parsing() -> None:
    assert parse_address("127.0.0.1:7070") == ("127.0.0.1", 7070)
    assert parse_address("[::1]:50051") == ("::1", 50051)
    assert parse_address("console.internal:443") == ("console.internal", 443)
    for bad in ("7070", "host:", "host:99999", "http://x"):
        with pytest.raises(ValueError, match="host:port"):
            parse_address(bad)


def _training_env(environ: dict[str, str], **run: object) -> dict[str, str]:
    """The training command's environment for `environ`, capsule dir /c, socket @starforge-j1.2."""
    return training_env(
        environ,
        spec=spec(**run),
        capsule_dir=pathlib.Path("/c"),
        report_socket="@starforge-j1.2",
        config_path=pathlib.Path("/s/config.json"),
    )


def test_training_env_drops_the_token_and_adds_the_sdk() -> None:
    environ = BASE | {"PATH": "/bin", "PYTHONPATH": "/mine", "PEX": "/c/r.pex", "_PEX_CACHE_ACCESS_LOCK": "x"}
    env = _training_env(environ)
    assert "FORGE_INGEST_TOKEN_FILE" not in env
    assert "PEX" not in env
    assert "_PEX_CACHE_ACCESS_LOCK" not in env
    assert env["FORGE_REPORT_SOCKET"] == "@starforge-j1.2"
    assert env["FORGE_CONFIG"] == "/s/config.json"
    assert env["PYTHONPATH"] == f"/c/sdk{os.pathsep}/mine"
    assert (env["FORGE_JOB_ID"], env["FORGE_ATTEMPT_ID"], env["FORGE_ATTEMPT_NUMBER"]) == ("j1", "j1.2", "2")
    assert env["PYTHONUNBUFFERED"] == "1"
    external = _training_env(BASE, observability="external")
    assert "PYTHONPATH" not in external


def test_training_env_gives_back_only_the_jobs_pex_variables() -> None:
    """bootstrap.sh set the job's PEX_* aside; only those come back under their own names: the
    prefix cannot bring back a variable the runner strips."""
    environ = BASE | {
        "FORGE_JOB_ENV_PEX_MODULE": "mine.main",
        "FORGE_JOB_ENV_FORGE_INGEST_TOKEN_FILE": "/s/planted",
        "FORGE_JOB_ENV_FORGE_REPORT_SOCKET": "@planted",
    }
    env = _training_env(environ)
    assert env["PEX_MODULE"] == "mine.main" and "FORGE_JOB_ENV_PEX_MODULE" not in env
    assert "FORGE_INGEST_TOKEN_FILE" not in env
    assert env["FORGE_REPORT_SOCKET"] == "@starforge-j1.2"


def _ctx(tmp_path: pathlib.Path, **run: object) -> AdapterContext:
    return AdapterContext(
        run=spec(**run).run,
        capsule_dir=tmp_path / "c",
        workspace_dir=tmp_path / "w",
        scratch_dir=tmp_path / "s",
        config_path=tmp_path / "s" / "config.json",
    )


def test_custom_adapter_runs_train_sh_with_bash_from_the_workspace(tmp_path: pathlib.Path) -> None:
    script = tmp_path / "w" / "experiments" / "demo" / "train.sh"
    script.parent.mkdir(parents=True)
    script.write_text("echo hi\n")
    command = get_adapter("custom").command(_ctx(tmp_path))
    assert pathlib.Path(command.argv[0]).name == "bash"
    assert command.argv[1:] == [str(script)]
    assert command.cwd == tmp_path / "w"
    assert (command.name, command.display) == ("train.sh", "experiments/demo/train.sh")


def test_custom_adapter_prechecks(tmp_path: pathlib.Path) -> None:
    with pytest.raises(PrecheckError, match=r"^experiments/x/train.sh not found in the workspace$"):
        get_adapter("custom").command(_ctx(tmp_path, entrypoint="experiments/x/train.sh"))
    with pytest.raises(PrecheckError, match="relative path inside the workspace"):
        get_adapter("custom").command(_ctx(tmp_path, entrypoint="../outside/train.sh"))
    with pytest.raises(PrecheckError, match=r"adapter 'nope'.*known: custom, nemo-rl, trl, verl"):
        get_adapter("nope")


def test_exit_status_of_signals() -> None:
    assert exit_status(0) == (0, 0)
    assert exit_status(3) == (3, 0)
    assert exit_status(-15) == (143, 15)
    assert exit_status(-9) == (137, 9)


def test_runner_requirements_are_pinned_pure_wheels_for_every_python() -> None:
    text = (pathlib.Path(__file__).resolve().parents[3] / "capsule" / "runner-requirements.txt").read_text()
    pins = parse_requirements(text)
    assert {p.name for p in pins} >= {"betterproto2", "grpclib", "h2", "hpack", "hyperframe", "multidict"}
    by_python = {v: {p.name: p.version for p in pins if v in p.pythons()} for v in ("3.10", "3.11", "3.12", "3.13")}
    assert by_python["3.10"]["multidict"] == "7.1.0"
    assert by_python["3.13"]["multidict"].startswith("7.2.")
    assert by_python["3.10"]["betterproto2"] == "0.10.0"
    assert by_python["3.10"]["grpclib"] == "0.4.9"


def test_requirement_parsing_errors() -> None:
    with pytest.raises(BuildError, match="line 1"):
        parse_requirements("grpclib>=0.4\n")
    with pytest.raises(BuildError, match="unsupported marker"):
        Pin("x", "1", 'sys_platform == "linux"', "0" * 64).pythons()
    with pytest.raises(BuildError, match="twice"):
        parse_requirements(f"a==1 --hash=sha256:{'0' * 64}\na==2 --hash=sha256:{'1' * 64}\n")
    with pytest.raises(BuildError, match="not a pure-Python"):
        check_pure(pathlib.Path("multidict-6.0-cp311-cp311-manylinux_2_17_x86_64.whl"))
    check_pure(pathlib.Path("six-1.17.0-py2.py3-none-any.whl"))


def test_every_registered_adapter_loads_under_its_own_name() -> None:
    from capsule.runner.adapters import REGISTRY

    for name in REGISTRY:
        adapter = get_adapter(name)
        assert adapter.name == name
        assert get_adapter(name) is adapter  # imported and built once
    with pytest.raises(PrecheckError, match="known: custom, nemo-rl, trl, verl"):
        get_adapter("nope")
