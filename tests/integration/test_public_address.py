"""The console refuses to start when fleets on other machines would be told a loopback address."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest
import yaml

from common.config import ConfigError
from control import config as control_config

FLEET = {"name": "remote", "address": "127.0.0.1:9", "inventory": [{"series": "cpu", "nodes": 1}]}


def _config(tmp: pathlib.Path, kind: str, **keys: object) -> pathlib.Path:
    doc = {"listen": "127.0.0.1:0", "state_dir": str(tmp / "state"), "fleets": [dict(FLEET, kind=kind)], **keys}
    if kind == "kuberay":
        doc["http_listen"] = "127.0.0.1:0"
    path = tmp / f"{kind}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize("kind", ["agent", "kuberay", "slurm"])
def test_starforge_control_refuses_a_loopback_public_address_for_remote_fleets(
    tmp_path: pathlib.Path, kind: str
) -> None:
    for keys in ({}, {"public_address": "localhost:7070"}, {"listen": "0.0.0.0:0", "tls": {"plaintext": True}}):
        r = subprocess.run(
            [
                str(pathlib.Path(sys.executable).parent / "starforge-control"),
                "--config",
                str(_config(tmp_path, kind, **keys)),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert r.returncode == 2, (keys, r.stdout, r.stderr)
        assert "starforge-control: configuration error: public_address:" in r.stderr
        assert f"but {kind} fleets run jobs on other machines" in r.stderr
        assert "allow_loopback_public_address: true" in r.stderr
        assert "Traceback" not in r.stderr
        assert not (tmp_path / "state").exists(), "nothing may start"


def test_loopback_is_allowed_for_local_fleets_and_when_told(tmp_path: pathlib.Path) -> None:
    control_config.load(_config(tmp_path, "local"), {})
    control_config.load(_config(tmp_path, "slurm", allow_loopback_public_address=True), {})
    control_config.load(_config(tmp_path, "slurm", public_address="control.internal:7070"), {})
    with pytest.raises(ConfigError, match=re.escape("public_http_url: http://127.0.0.1:8081 is a loopback")):
        control_config.load(
            _config(
                tmp_path, "kuberay", public_address="control.internal:7070", public_http_url="http://127.0.0.1:8081"
            ),
            {},
        )
