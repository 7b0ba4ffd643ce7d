"""The command line end to end for failures that need no console (CliRunner, exit codes, messages)."""

from __future__ import annotations

import json
import os
import pathlib
import socket
import stat
from collections.abc import Iterator

import pytest
import typer
from typer.testing import CliRunner

from cli.main import app
from tests.unit.cli.helpers import write

runner = CliRunner()


def sf(*args: str, cwd: pathlib.Path | None = None, env: dict[str, str] | None = None) -> typer.testing.Result:
    old = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        return runner.invoke(app, list(args), env=env)
    finally:
        os.chdir(old)


@pytest.fixture
def unused_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port: int = s.getsockname()[1]
    s.close()
    return port


def test_lazy_command_table_matches_the_modules() -> None:
    """`cli.main.COMMANDS` names exactly the commands its modules define, each with its module."""
    from cli.main import COMMANDS, load_commands

    defined: dict[str, tuple[str, str]] = {}
    for source in set(COMMANDS.values()):
        for name in load_commands(*source):
            assert name not in defined, f"{name} is defined twice"
            defined[name] = source
    assert defined == COMMANDS


def test_simple_commands_do_not_import_what_they_do_not_need() -> None:
    """Start-up time: `sf --version` loads no gRPC and no command module; `sf job ls` (JSON)
    loads neither rich nor the modules of other commands (bench `cli`)."""
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "from cli.main import app\n"
        "args = sys.argv[1:]\n"
        "try:\n"
        "    app(args)\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in {'grpc', 'rich', 'yaml', 'cli'})))\n"
    )
    env = {
        **os.environ,
        "STARFORGE_CONSOLE": "127.0.0.1:1",
        "STARFORGE_TOKEN": "t",
        "STARFORGE_CLIENT_CONFIG": "/nonexistent",
    }

    def loaded(*args: str) -> set[str]:
        r = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, env=env, check=False)
        return set(r.stdout.split())

    version = loaded("--version")
    assert not {m for m in version if m.startswith(("grpc", "rich", "yaml", "cli.commands"))}, version
    ls = loaded("-o", "json", "job", "ls")
    assert "cli.commands.job" in ls
    assert not {m for m in ls if m.startswith(("rich", "yaml", "cli.commands.submit", "cli.pack", "cli.artifacts"))}, ls


def test_version() -> None:
    result = sf("--version")
    assert result.exit_code == 0
    assert result.stdout.startswith("sf ")


def _commands(group: typer.main.TyperGroup, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:  # type: ignore[name-defined]
    for name, cmd in group.commands.items():
        path = (*prefix, name)
        yield path
        if hasattr(cmd, "commands"):
            yield from _commands(cmd, path)


def test_every_command_has_help_with_an_example() -> None:
    root = typer.main.get_command(app)
    paths = list(_commands(root))
    assert ("submit",) in paths
    assert ("job", "logs") in paths
    assert ("token", "create") in paths
    for path in paths:
        result = sf(*path, "--help")
        assert result.exit_code == 0, (path, result.output)
        assert "Example" in result.stdout, path


def test_unknown_experiment_exits_2_listing_existing(lab: pathlib.Path) -> None:
    result = sf("submit", "nope", cwd=lab)
    assert result.exit_code == 2
    assert "error: unknown experiment `nope`" in result.stderr
    assert "existing experiments: demo" in result.stderr
    assert "Traceback" not in result.output


def test_missing_train_sh_exits_2(lab: pathlib.Path) -> None:
    (lab / "experiments/demo/train.sh").unlink()
    result = sf("submit", "demo", cwd=lab)
    assert result.exit_code == 2
    assert "experiments/demo/train.sh not found" in result.stderr


def test_malformed_starforge_yaml_exits_2_with_file_and_line(lab: pathlib.Path) -> None:
    write(lab / "starforge.yaml", 'project: "@alice/lab"\npackage:\n  exclude: "*.ckpt"\n')
    result = sf("submit", "demo", cwd=lab / "experiments")
    assert result.exit_code == 2
    assert f"{lab / 'starforge.yaml'}:3: `package.exclude` must be a list" in result.stderr


def test_not_in_a_lab(tmp_path: pathlib.Path) -> None:
    result = sf("submit", "demo", cwd=tmp_path)
    assert result.exit_code == 2
    assert "not inside a lab" in result.stderr


def test_bad_flags_exit_2_before_anything_else(lab: pathlib.Path) -> None:
    for args, needle in (
        (("-s", "oops"), "expected key=value"),
        (("--profile", "h200:zero"), "--profile"),
        (("--retries", "-1"), "--retries"),
    ):
        result = sf("submit", "demo", *args, cwd=lab)
        assert result.exit_code == 2, args
        assert needle in result.stderr


def test_usage_errors_use_the_same_format() -> None:
    result = sf("submit")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: Missing argument")
    assert "sf submit --help" in result.stderr
    result = sf("job", "ls", "--bogus")
    assert result.exit_code == 2
    assert "error: No such option" in result.stderr


def test_no_token_exits_4(lab: pathlib.Path) -> None:
    result = sf("submit", "demo", cwd=lab)
    assert result.exit_code == 4
    assert "no personal access token" in result.stderr
    assert "sf login" in result.stderr


def test_unreachable_console_exits_5(lab: pathlib.Path, unused_port: int) -> None:
    env = {"STARFORGE_CONSOLE": f"127.0.0.1:{unused_port}", "STARFORGE_TOKEN": "sfp_x"}
    result = sf("whoami", env=env)
    assert result.exit_code == 5
    assert f"cannot reach the console at 127.0.0.1:{unused_port}" in result.stderr
    assert "start one with `sf up`" in result.stderr
    result = sf("submit", "demo", cwd=lab, env=env)  # packs, then fails on the first call
    assert result.exit_code == 5


def test_json_errors_on_stderr(unused_port: int) -> None:
    result = sf("--console", f"127.0.0.1:{unused_port}", "-o", "json", "job", "ls", env={"STARFORGE_TOKEN": "t"})
    assert result.exit_code == 5
    assert result.stdout == ""
    doc = json.loads(result.stderr)
    assert doc["error"]["code"] == "UNAVAILABLE"
    assert doc["error"]["exit_code"] == 5
    result = sf("job", "ls", "-o", "json", "--state", "bogus", env={"STARFORGE_TOKEN": "t"})
    assert result.exit_code == 2
    assert json.loads(result.stderr)["error"]["code"] == "USAGE"


def test_init_offline(tmp_path: pathlib.Path) -> None:
    result = sf("init", str(tmp_path / "mylab"), "--user", "bob", env={"STARFORGE_TOKEN": ""})
    assert result.exit_code == 0, result.output
    text = (tmp_path / "mylab/starforge.yaml").read_text()
    assert 'project: "@bob/mylab"' in text
    assert "include: []" in text
    assert "exclude: []" in text
    assert (tmp_path / "mylab/experiments").is_dir()
    assert ".starforge/" in (tmp_path / "mylab/.gitignore").read_text()
    again = sf("init", str(tmp_path / "mylab"), "--user", "bob")
    assert again.exit_code == 2
    assert "already a lab" in again.stderr


def test_init_json_and_user_fallback(tmp_path: pathlib.Path) -> None:
    result = sf("-o", "json", "init", str(tmp_path / "x"), "--name", "study")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["project"] == "@tester/study"  # $USER


def test_new_refuses_to_overwrite(lab: pathlib.Path) -> None:
    result = sf("new", "demo", "--method", "custom/custom", cwd=lab)
    assert result.exit_code == 2
    assert "already exists" in result.stderr


def test_logout_and_login_config_file(tmp_path: pathlib.Path, isolated_env: pathlib.Path) -> None:
    from cli import config

    path = isolated_env / ".config/starforge/config.yaml"
    config.save(path, console="h:1", token="sfp_secret")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    result = sf("logout")
    assert result.exit_code == 0
    assert config.read_file(path) == {"console": "h:1"}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_down_without_console(tmp_path: pathlib.Path) -> None:
    result = sf("down", "--state-dir", str(tmp_path))
    assert result.exit_code == 0
    assert "no console running" in result.stderr


def test_job_group_without_subcommand_shows_help() -> None:
    result = sf("job")
    assert result.exit_code == 2
    assert "logs" in result.output
