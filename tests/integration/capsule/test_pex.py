"""runner.pex: only pure wheels inside, reproducible builds, importable on every supported Python."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import zipfile
from typing import Any

import pytest

from .conftest import BUILD_DIR, REPO
from .pythons import find_python

pytestmark = pytest.mark.timeout(600)
PURE_WHEEL = re.compile(r"^[A-Za-z0-9_.]+-[^-]+-(py3|py2\.py3)-none-any\.whl$")


def runner_path(manifest: dict[str, Any]) -> pathlib.Path:
    return BUILD_DIR / str(manifest["runner"]["path"])


def test_every_wheel_in_the_pex_is_pure(capsule_manifest: dict[str, Any]) -> None:
    with zipfile.ZipFile(runner_path(capsule_manifest)) as pex:
        names = pex.namelist()
        info = json.loads(pex.read("PEX-INFO"))
    wheels = sorted({name.split("/")[1] for name in names if name.startswith(".deps/") and name != ".deps/"})
    assert wheels, "the pex has no .deps"
    platform_wheels = [w for w in wheels if not PURE_WHEEL.match(w)]
    assert platform_wheels == [], f"platform-specific wheels in the runner: {platform_wheels}"
    assert sorted(info["distributions"]) == wheels
    dists = {w.split("-")[0].lower() for w in wheels}
    assert dists == {
        "betterproto2", "grpclib", "h2", "hpack", "hyperframe", "multidict",
        "python_dateutil", "six", "typing_extensions",
    }  # fmt: skip
    assert {"multidict-7.1.0-py3-none-any.whl"} < set(wheels)  # Python 3.10
    assert any(w.startswith("multidict-7.2.") for w in wheels)  # Python 3.11+
    assert "sfrunner/main.py" in names
    assert "sfrunner/adapters/custom.py" in names
    assert "sfpb/starforge/ingest/v1/__init__.py" in names
    assert not any(name.endswith((".so", ".pyd", ".pyc")) for name in names)
    assert info["entry_point"] == "sfrunner.boot:entry"


def _build(out: pathlib.Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "capsule.build", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_the_build_is_reproducible_and_a_rebuild_is_a_no_op(
    tmp_path: pathlib.Path, capsule_manifest: dict[str, Any]
) -> None:
    first, second = _build(tmp_path / "a"), _build(tmp_path / "b")
    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    manifests = [json.loads((tmp_path / d / "manifest.json").read_text()) for d in ("a", "b")]
    assert manifests[0]["runner"] == manifests[1]["runner"] == capsule_manifest["runner"]
    runner = manifests[0]["runner"]
    assert runner["path"] == f"runner-{runner['sha256'][:16]}.pex"
    assert [(f["path"], f["sha256"]) for f in manifests[0]["files"]] == [
        (f["path"], f["sha256"]) for f in capsule_manifest["files"]
    ]
    assert manifests[0]["files"][0]["source"] == str((tmp_path / "a" / "bootstrap.sh").resolve())
    again = _build(tmp_path / "a")
    assert again.returncode == 0
    assert "up to date" in again.stdout


@pytest.mark.parametrize("version", ["3.10", "3.11", "3.12", "3.13"])
def test_the_runner_imports_on_every_supported_python(
    version: str, tmp_path: pathlib.Path, capsule_manifest: dict[str, Any]
) -> None:
    python = find_python(version)
    if python is None:
        pytest.skip(f"no Python {version} on this machine (pyenv or python{version} on PATH)")
    code = (
        "import sys, multidict, grpclib.client, betterproto2, sfrunner.main; "
        "from sfpb.starforge.ingest import v1; "
        "print(sys.version_info[:2], multidict.__version__, bytes(v1.ReportRequest(attempt_id='a')))"
    )
    env = {"PATH": "/usr/bin:/bin", "PEX_ROOT": str(tmp_path / "pex"), "PEX_INTERPRETER": "1"}
    proc = subprocess.run(
        [python, "-I", str(runner_path(capsule_manifest)), "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    major, minor = version.split(".")
    expected_multidict = "7.1.0" if version == "3.10" else "7.2."
    assert proc.stdout.startswith(f"({major}, {minor}) {expected_multidict}")
    assert proc.stdout.strip().endswith("b'\\n\\x01a'")
    assert os.listdir(tmp_path / "pex")
