"""The SDK against a real AF_UNIX datagram socket: abstract names, paths, blocking instead of dropping."""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys
import time

import pytest

from capsule.runner.datagrams import DatagramParser

from .conftest import REPO
from .pythons import find_python

SDK_DIR = REPO / "capsule" / "sdk"
pytestmark = pytest.mark.timeout(120)


def _receiver(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.settimeout(10)
    return sock


def _sdk(python: str, code: str, socket_name: str | None) -> subprocess.Popen[str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(SDK_DIR)}
    if socket_name is not None:
        env["FORGE_REPORT_SOCKET"] = socket_name
    return subprocess.Popen([python, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _pythons() -> list[str]:
    found = [sys.executable]
    old = find_python("3.8")
    return [*found, old] if old else found


@pytest.mark.parametrize("python", _pythons())
def test_reports_arrive_over_an_abstract_socket(python: str) -> None:
    name = f"@starforge-test-{os.getpid()}-{time.monotonic_ns()}"
    with _receiver("\0" + name[1:]) as sock:
        proc = _sdk(
            python,
            "import starforge\nstarforge.report(loss=0.5)\nstarforge.report(loss=0.25, lr=1e-3)\n"
            "starforge.sample('p', 'c', reward=0.5, judge='ok')\n",
            name,
        )
        datagrams = [sock.recv(1 << 20) for _ in range(3)]
        assert proc.wait(30) == 0, proc.stderr.read() if proc.stderr else ""
    parser = DatagramParser()
    points = [(p.step, p.name, p.value) for d in datagrams for p in parser.parse(d).points]
    assert points == [(0, "loss", 0.5), (1, "loss", 0.25), (1, "lr", 1e-3)]
    assert json.loads(datagrams[2])["kind"] == "sample"
    assert json.loads(datagrams[2])["step"] == 1


def test_reports_arrive_over_a_filesystem_socket(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "report.sock")
    with _receiver(path) as sock:
        proc = _sdk(sys.executable, "import starforge\nstarforge.report(step=41, loss=1)\n", path)
        data = sock.recv(1 << 20)
        assert proc.wait(30) == 0
    assert json.loads(data)["step"] == 41


def test_a_full_socket_blocks_the_sender_instead_of_dropping() -> None:
    name = f"@starforge-test-block-{os.getpid()}-{time.monotonic_ns()}"
    count = 3000
    with _receiver("\0" + name[1:]) as sock:
        proc = _sdk(sys.executable, f"import starforge\nfor i in range({count}):\n    starforge.report(loss=i)\n", name)
        time.sleep(1.0)
        assert proc.poll() is None, "the sender finished although nobody read: datagrams were dropped"
        steps = []
        for _ in range(count):
            steps.append(json.loads(sock.recv(1 << 20))["step"])
        assert proc.wait(30) == 0
    assert steps == list(range(count))


def test_outside_starforge_report_warns_once_and_does_nothing() -> None:
    proc = _sdk(sys.executable, "import starforge\nfor i in range(3):\n    print(starforge.report(loss=i))\n", None)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert out.split() == ["0", "1", "2"]
    assert err.count("starforge: FORGE_REPORT_SOCKET is not set") == 1


def test_a_runner_that_went_away_is_a_warning_not_a_crash() -> None:
    proc = _sdk(
        sys.executable,
        "import starforge\nstarforge.report(loss=1)\nstarforge.report(loss=2)\n",
        "@starforge-nobody-listens",
    )
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert err.count("is not listening") == 1
