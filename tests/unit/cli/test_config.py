"""Client config: file location, precedence, 0600 writes, clear errors."""

from __future__ import annotations

import pathlib
import stat

import pytest

from cli import config
from cli.errors import CliError


def test_path_resolution(tmp_path: pathlib.Path) -> None:
    assert config.config_path({"STARFORGE_CLIENT_CONFIG": str(tmp_path / "c.yaml")}) == tmp_path / "c.yaml"
    assert config.config_path({"XDG_CONFIG_HOME": "/x"}) == pathlib.Path("/x/starforge/config.yaml")
    assert config.config_path({"HOME": "/home/a"}) == pathlib.Path("/home/a/.config/starforge/config.yaml")


def test_precedence_file_env_flag(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.yaml"
    config.save(path, console="file:1", token="t_file")
    env = {"STARFORGE_CLIENT_CONFIG": str(path)}
    cfg = config.load(env)
    assert (cfg.console, cfg.token, cfg.console_from) == ("file:1", "t_file", "file")
    cfg = config.load({**env, "STARFORGE_CONSOLE": "env:2", "STARFORGE_TOKEN": "t_env"})
    assert (cfg.console, cfg.token, cfg.console_from) == ("env:2", "t_env", "env")
    cfg = config.load({**env, "STARFORGE_CONSOLE": "env:2"}, console_flag="flag:3")
    assert (cfg.console, cfg.console_from) == ("flag:3", "flag")
    assert config.load({"STARFORGE_CLIENT_CONFIG": str(tmp_path / "none.yaml")}).console == config.DEFAULT_CONSOLE


def test_saved_file_is_private_and_atomic(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "deep" / "config.yaml"
    config.save(path, console="h:1", token="secret")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert config.read_file(path) == {"console": "h:1", "token": "secret"}
    assert [p.name for p in path.parent.iterdir()] == ["config.yaml"]  # no temp file left


def test_address_normalisation() -> None:
    assert config.normalize_address("grpc://h:1/") == "h:1"
    assert config.normalize_address("console.example") == "console.example:7070"
    assert config.normalize_address("[::1]") == "[::1]:7070"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("console: [a\n", "not valid YAML"),
        ("- a\n", "must be a mapping"),
        ("consol: x\n", "unknown key(s) consol"),
        ("token: 3\n", "`token` must be a string"),
    ],
)
def test_malformed_file(tmp_path: pathlib.Path, text: str, needle: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(CliError) as info:
        config.read_file(path)
    assert info.value.exit_code == 2
    assert needle in info.value.message
    assert str(path) in info.value.message
