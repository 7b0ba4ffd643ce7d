"""Where an installed StarForge finds what `make dist` packaged, and a checkout its build outputs
(tests/integration/deploy/test_wheels.py runs the real installed wheel)."""

from __future__ import annotations

import pathlib
import shutil
import sys
import tomllib
import zipfile

import pytest

from cli.commands import console
from common import __version__, source
from common.config import ConfigError
from control import bundled, embedded
from control.config import ControlConfig

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_a_checkout_uses_its_build_outputs() -> None:
    assert source.checkout() == ROOT
    assert bundled.packaged_capsule() is None and bundled.packaged_ui() is None  # only a wheel has them
    cfg = ControlConfig()
    assert cfg.capsule_dir == pathlib.Path("build/capsule")
    assert cfg.ui_dir == ROOT / "web" / "dist"


def test_the_version_is_pyprojects() -> None:
    assert __version__ == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_packaged_assets_win(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "capsule").mkdir()
    (tmp_path / "capsule" / "manifest.json").write_text("{}")
    (tmp_path / "web").mkdir()
    (tmp_path / "web" / "index.html").write_text("<!doctype html>")
    monkeypatch.setattr(bundled, "_packaged", lambda name: tmp_path / name)
    cfg = ControlConfig()
    assert cfg.capsule_dir == tmp_path / "capsule"
    assert cfg.ui_dir == tmp_path / "web"
    assert embedded.ensure_capsule() == tmp_path / "capsule"  # nothing is built at run time


def test_no_capsule_and_no_checkout_is_one_clear_error(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bundled, "_packaged", lambda name: tmp_path / name)
    monkeypatch.setattr(embedded, "REPO", None)
    monkeypatch.setattr(embedded, "CAPSULE_DIR", None)
    with pytest.raises(ConfigError, match="no capsule"):
        embedded.ensure_capsule()


def test_the_console_process_never_has_the_cwd_on_its_path(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cmd = console._child_command(tmp_path, "127.0.0.1:1", "process", tmp_path / "r.json")
    assert cmd[:3] == [sys.executable, "-P", "-c"]
    assert repr(str(ROOT)) in cmd[3]  # a checkout's own packages first, as before
    monkeypatch.setattr(console, "checkout", lambda: None)  # installed: the interpreter's packages only
    cmd = console._child_command(tmp_path, "127.0.0.1:1", "process", tmp_path / "r.json")
    assert cmd[:3] == [sys.executable, "-P", "-c"] and "sys.path.insert" not in cmd[3]


def test_the_api_wheel_holds_the_generated_code_only_and_is_reproducible(tmp_path: pathlib.Path) -> None:
    from tools import api_wheel

    first = api_wheel.build(tmp_path / "a")
    second = api_wheel.build(tmp_path / "b")
    assert first.read_bytes() == second.read_bytes()
    with zipfile.ZipFile(first) as zf:
        names = zf.namelist()
        meta = zf.read(f"starforge_api-{api_wheel.version()}.dist-info/METADATA").decode()
    assert {n.split("/", 1)[0] for n in names} == {"starforge_api", f"starforge_api-{api_wheel.version()}.dist-info"}
    assert "starforge_api/control/v1/control_service_pb2_grpc.py" in names
    assert "starforge_api/job/v1/job_pb2.pyi" in names
    assert "Name: starforge-api\n" in meta
    assert "Requires-Dist: grpcio>=1.85,<2\n" in meta


def test_the_staged_pyproject_leaves_the_generated_code_to_the_api_wheel(tmp_path: pathlib.Path) -> None:
    from tools import api_wheel, build_dist

    shutil.copyfile(build_dist.REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    build_dist.stage_pyproject(tmp_path)
    project = tomllib.loads((tmp_path / "pyproject.toml").read_text())
    assert api_wheel.requirement() in project["project"]["dependencies"]
    assert "starforge_api*" not in project["tool"]["setuptools"]["packages"]["find"]["include"]
