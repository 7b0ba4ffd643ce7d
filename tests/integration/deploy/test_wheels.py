"""StarForge installed from its wheels, as a user would: `make dist`'s wheel `pip install`ed into a
fresh virtualenv outside the checkout, then used from a directory outside it with a clean
environment (no PYTHONPATH, not the dev venv on PATH): the four commands start, `sf up` runs the
embedded console with the capsule and web console the wheel ships, and a real job submitted with
`sf submit` from a new lab runs to SUCCEEDED. Nothing may come from the checkout.

The wheels are built once for the module (tools/build_dist.py, as `make dist` does) and installed
offline from build/dist-deps (`make dist-deps`, which `make test` runs).
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from tests.ports import free_port
from tools import build_dist

pytestmark = pytest.mark.slow

REPO = pathlib.Path(__file__).resolve().parents[3]
DIST_DEPS = REPO / "build" / "dist-deps"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
COMMANDS = ("sf", "starforge-control", "starforge-executor", "forgelet")
# Every package of the platform wheel, imported in the installed venv: each must come from there.
PACKAGES = (
    "cli", "control", "executor_svc", "forgelet", "recipes", "capsule", "common",
    "starforge_api.control.v1.control_service_pb2", "sfpb",
)  # fmt: skip
TRAIN = """#!/usr/bin/env bash
set -euo pipefail
python3 - "$FORGE_OUT_DIR" <<'PY'
import pathlib, sys
import starforge  # the SDK the installed capsule puts on the job's path
for step in range(1, 4):
    starforge.report(step=step, loss=1.0 / step)
    print(f"step {step}", flush=True)
(pathlib.Path(sys.argv[1]) / "done.txt").write_text("trained\\n")
PY
"""


@dataclass(frozen=True)
class Installed:
    venv: pathlib.Path
    wheel: pathlib.Path
    root: pathlib.Path  # a directory outside the checkout for everything the test makes

    @property
    def bin(self) -> pathlib.Path:
        return self.venv / "bin"

    def env(self, **extra: str) -> dict[str, str]:
        """A clean environment: the venv's bin and the system's, no PYTHONPATH, no dev venv."""
        return {
            "PATH": f"{self.bin}{os.pathsep}/usr/local/bin{os.pathsep}/usr/bin{os.pathsep}/bin",
            "HOME": str(self.root / "home"),
            "LANG": "C.UTF-8",
            "STARFORGE_CLIENT_CONFIG": str(self.root / "client.yaml"),
            "STARFORGE_HOME": str(self.root / "state"),
            "GIT_AUTHOR_NAME": "Wheel Test",
            "GIT_AUTHOR_EMAIL": "wheel@starforge.invalid",
            "GIT_COMMITTER_NAME": "Wheel Test",
            "GIT_COMMITTER_EMAIL": "wheel@starforge.invalid",
            **extra,
        }

    def run(self, *cmd: str, cwd: pathlib.Path | None = None, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(cmd),
            cwd=cwd or self.root,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def ok(self, *cmd: str, cwd: pathlib.Path | None = None, timeout: float = 180) -> str:
        r = self.run(*cmd, cwd=cwd, timeout=timeout)
        assert r.returncode == 0, f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
        return r.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    if not (DIST_DEPS / ".downloaded").is_file():
        pytest.fail("build/dist-deps is missing: run `make dist-deps` (make test does) to install offline")
    root = tmp_path_factory.mktemp("wheels")
    assert not root.resolve().is_relative_to(REPO)
    wheels = build_dist.build(root / "dist", stage=root / "stage")
    wheel = wheels[0]
    assert wheel.name == f"starforge-{VERSION}-py3-none-any.whl"
    venv = root / "venv"
    # The interpreter the dev venv was made from, not the dev venv: the new one sees none of its packages.
    subprocess.run(
        [getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(venv)], check=True
    )
    # The dev venv's pip installs into the new venv (--python); --no-index: offline.
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
         "--no-compile", "--no-index", "--find-links", str(DIST_DEPS), "--find-links", str(wheel.parent),
         f"{wheel}[ui]"],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert pip.returncode == 0, pip.stdout + pip.stderr
    (root / "home").mkdir()
    return Installed(venv, wheel, root)


def test_the_wheel_holds_the_packages_and_assets_but_no_starforge_package(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as zf:
        names = zf.namelist()
        manifest = json.loads(zf.read("control/assets/capsule/manifest.json"))
    top = {n.split("/", 1)[0] for n in names if ".dist-info/" not in n}
    assert top == build_dist.TOP_LEVEL  # no `starforge`: the SDK's name
    assert f"control/assets/capsule/{manifest['runner']['path']}" in names
    assert all(not pathlib.Path(f["source"]).is_absolute() for f in manifest["files"])
    assert "control/assets/web/index.html" in names


def test_the_commands_start_and_report_the_version(installed: Installed) -> None:
    for command in COMMANDS:
        out = installed.ok(str(installed.bin / command), "--help")
        assert "usage" in out.lower(), (command, out)
    assert installed.ok(str(installed.bin / "sf"), "--version").strip() == f"sf {VERSION}"


def test_nothing_is_imported_from_the_checkout(installed: Installed) -> None:
    probe = (
        "import importlib, json, sys\n"
        f"mods = {{n: importlib.import_module(n).__file__ for n in {list(PACKAGES)!r}}}\n"
        "from common.source import checkout\n"
        "from control import bundled\n"
        "try:\n"
        "    import starforge\n"
        "    sdk = starforge.__file__\n"
        "except ImportError:\n"
        "    sdk = None\n"
        "print(json.dumps({'mods': mods, 'checkout': str(checkout()), 'sdk': sdk, 'path': sys.path,\n"
        "    'capsule': str(bundled.default_capsule_dir()), 'ui': str(bundled.default_ui_dir())}))\n"
    )
    got = json.loads(installed.ok(str(installed.bin / "python"), "-c", probe))
    venv = installed.venv.resolve()
    for name, file in got["mods"].items():
        assert pathlib.Path(file).resolve().is_relative_to(venv), (name, file)
    assert not any(p and pathlib.Path(p).resolve().is_relative_to(REPO) for p in got["path"]), got["path"]
    assert got["checkout"] == "None"
    assert got["sdk"] is None  # the platform wheel does not install the SDK's `starforge`
    assert pathlib.Path(got["capsule"]).is_relative_to(venv)
    assert pathlib.Path(got["ui"]).is_relative_to(venv)


@contextlib.contextmanager
def _sf_up(installed: Installed, state: pathlib.Path) -> Iterator[dict[str, object]]:
    sf = str(installed.bin / "sf")
    listen = f"127.0.0.1:{free_port()}"
    up = installed.run(sf, "up", "--state-dir", str(state), "--listen", listen, "--detach")
    pid_file = state / "console.pid"
    try:
        log = (state / "console.log").read_text() if (state / "console.log").exists() else ""
        assert up.returncode == 0, f"{up.stdout}\n{up.stderr}\n{log}"
        yield json.loads((state / "console.ready.json").read_text())
    finally:
        installed.run(sf, "down", "--state-dir", str(state), timeout=60)
        with contextlib.suppress(OSError, ValueError):  # still there: stop the PID we started
            os.kill(int(pid_file.read_text()), signal.SIGTERM)


def test_sf_up_and_a_real_job_from_a_lab(installed: Installed) -> None:
    sf = str(installed.bin / "sf")
    state, lab = installed.root / "state", installed.root / "lab"
    with _sf_up(installed, state) as ready:
        pid = int(str(ready["pid"]))
        # the console is the venv's Python, and nothing put the checkout on its path
        cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert pathlib.Path(cmdline[0].decode()) == installed.bin / "python", cmdline
        assert str(REPO).encode() not in b" ".join(cmdline), cmdline
        # the web console the wheel ships, through envoy (the [ui] extra)
        index = httpx.get(str(ready["ui"]), timeout=30)
        assert index.status_code == 200
        packaged = installed.venv.glob("lib/python*/site-packages/control/assets/web/index.html")
        assert index.text == next(packaged).read_text()

        installed.ok(sf, "init", str(lab), "--name", "wheel-lab")
        installed.ok("git", "init", "-q", cwd=lab)
        installed.ok(sf, "new", "hello", "--method", "custom/custom", cwd=lab)
        exp = lab / "experiments" / "hello"
        (exp / "train.sh").write_text(TRAIN)
        config = exp / "config.yaml"
        config.write_text(config.read_text().replace('image: ""', "image: host"))
        installed.ok("git", "add", "-A", cwd=lab)
        installed.ok("git", "commit", "-qm", "hello", cwd=lab)
        installed.ok(sf, "submit", "hello", "--profile", "cpu", "--follow", cwd=lab, timeout=300)

        job = json.loads(installed.ok(sf, "-o", "json", "job", "status", "latest", cwd=lab))["job"]
        assert job["state"] == "JOB_STATE_SUCCEEDED", job
        assert (pathlib.Path(job["out_dir"]) / "done.txt").read_text() == "trained\n"
        logs = installed.ok(sf, "job", "logs", job["job_id"], cwd=lab)
        assert [ln for ln in logs.splitlines() if ln.startswith("step ")] == ["step 1", "step 2", "step 3"]
        # the job ran the runner.pex the wheel ships
        manifest = json.loads(
            next(installed.venv.glob("lib/python*/site-packages/control/assets/capsule/manifest.json")).read_text()
        )
        assert manifest["runner"]["sha256"] in json.dumps(job), job
