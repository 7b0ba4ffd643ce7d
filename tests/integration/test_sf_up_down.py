"""`sf up --state-dir X --detach` then `sf down` with no flag stops that console: the client config
names it, and `sf down` finds its state directory from there (not from the default one)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from cli import config as client_config
from cli.commands import console as console_cmd
from tests.ports import free_port

SF = pathlib.Path(sys.executable).parent / "sf"


def _sf(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SF), *args], env=env, capture_output=True, text=True, timeout=120, check=False)


def test_down_without_flags_stops_the_console_the_client_config_names(tmp_path: pathlib.Path) -> None:
    state = tmp_path / "elsewhere" / "console-state"
    default_home = tmp_path / "default-home"
    env = {
        **os.environ,
        "HOME": str(tmp_path / "home"),
        "STARFORGE_HOME": str(default_home),
        "STARFORGE_CLIENT_CONFIG": str(tmp_path / "client" / "config.yaml"),
    }
    env.pop("STARFORGE_CONSOLE", None)
    env.pop("STARFORGE_TOKEN", None)
    address = f"127.0.0.1:{free_port()}"
    up = _sf(env, "up", "--state-dir", str(state), "--listen", address, "--detach")
    assert up.returncode == 0, up.stderr
    pid = int((state / console_cmd.PID_FILE).read_text().strip())
    try:
        assert console_cmd.pid_alive(pid)
        assert client_config.load(env).console == address

        down = _sf(env, "down")
        assert down.returncode == 0, down.stderr
        assert "stopped the console" in down.stderr, down.stderr
        assert not console_cmd.pid_alive(pid)
        assert not (state / console_cmd.PID_FILE).exists()
        assert not default_home.exists()  # it never looked at (or created) the default directory
        assert client_config.console_state_dir(env, address) is None

        again = _sf(env, "down")
        assert again.returncode == 0, again.stderr
        assert "no console running" in again.stderr
    finally:
        if console_cmd.pid_alive(pid):
            os.kill(pid, 15)
