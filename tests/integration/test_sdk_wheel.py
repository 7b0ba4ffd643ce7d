"""The `starforge` SDK wheel: built the way `make sdk-wheel` builds it, installed into a fresh venv
outside the checkout, imported and used (a report reaches a real AF_UNIX socket)."""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys

from capsule import sdk_wheel

REPO = pathlib.Path(__file__).resolve().parents[2]

USE = """
import json, os, starforge
assert starforge.__file__.startswith(os.environ["VENV"]), starforge.__file__
print(json.dumps({
    "version": starforge.__version__,
    "url": starforge.observability_url(),
    "tool": starforge.observability_tool(),
    "step": starforge.report(step=7, loss=0.5),
}))
"""


def test_sdk_wheel_builds_installs_in_a_fresh_venv_and_works(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "capsule.sdk_wheel", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    wheel = pathlib.Path(built.stdout.strip())
    assert wheel.parent == out and wheel.name.startswith("starforge_sdk-")
    again = sdk_wheel.build(tmp_path / "again")
    assert again.read_bytes() == wheel.read_bytes(), "the wheel is reproducible"

    venv = tmp_path / "venv"
    assert REPO not in venv.parents
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--no-index", "--no-deps", "-q", str(wheel)],
        check=True,
        capture_output=True,
    )
    sock_path = tmp_path / "report.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(sock_path))
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "VENV": str(venv),
            "FORGE_REPORT_SOCKET": str(sock_path),
            "STARFORGE_OBSERVABILITY_URL": "https://wandb.example.internal",
            "STARFORGE_OBSERVABILITY_TOOL": "wandb",
        }
        r = subprocess.run([str(python), "-c", USE], cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
        assert r.returncode == 0, r.stderr
        result = json.loads(r.stdout)
        sock.settimeout(10)
        datagram = json.loads(sock.recv(65536))
    assert result == {
        "version": sdk_wheel.sdk_version((sdk_wheel.SDK_DIR / "__init__.py").read_text()),
        "url": "https://wandb.example.internal",
        "tool": "wandb",
        "step": 7,
    }
    assert datagram["kind"] == "metrics" and datagram["step"] == 7 and datagram["scalars"]["loss"] == 0.5
