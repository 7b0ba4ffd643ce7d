"""`make test`'s work units (tests/xdist_groups.py), with the installed pytest and pytest-xdist: a
scratch suite run on two real workers puts each backend's tests on one worker and keeps every
other module whole, and the groups' file is gone afterwards."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

CONFTEST = """
import pytest

from tests import xdist_groups


@pytest.fixture(scope="session")
def dockerd():
    return "engine"


@pytest.fixture(scope="session")
def images(dockerd):
    return "images"


def pytest_configure(config):
    config.addinivalue_line("markers", "slurm: a kind that needs the Slurm cluster")
    xdist_groups.configure(config)


def pytest_unconfigure(config):
    xdist_groups.unconfigure(config)


def pytest_collection_modifyitems(config, items):
    xdist_groups.publish(items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    return xdist_groups.scheduler(config, log)
"""

MODULE = """
import pytest


def test_through_a_fixture(images):
    pass


@pytest.mark.parametrize("n", [1, 2])
def test_engine(dockerd, n):
    pass


@pytest.mark.parametrize("kind", ["process", pytest.param("slurm", marks=pytest.mark.slurm)])
def test_kind(kind):
    pass


def test_plain_1():
    pass


def test_plain_2():
    pass
"""


def test_each_backend_runs_on_one_worker_and_other_modules_stay_whole(tmp_path: pathlib.Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    for name in ("a", "b", "c", "d"):
        (tmp_path / f"test_{name}.py").write_text(MODULE)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
    env.pop("PYTEST_XDIST_WORKER", None)  # this test may itself run on a worker
    env.pop("STARFORGE_TEST_GROUPS", None)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", "-v"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    worker_of = dict((m.group(2), m.group(1)) for m in re.finditer(r"\[(gw\d)\] \[\s*\d+%\] PASSED (\S+)", run.stdout))
    assert len(worker_of) == 4 * 7, run.stdout
    docker = {w for t, w in worker_of.items() if "test_engine" in t or "test_through_a_fixture" in t}
    slurm = {w for t, w in worker_of.items() if t.endswith("[slurm]")}
    assert len(docker) == 1 and len(slurm) == 1, worker_of
    for name in ("a", "b", "c", "d"):
        module = {t: w for t, w in worker_of.items() if t.startswith(f"test_{name}.py::")}
        rest = {w for t, w in module.items() if "test_plain" in t or t.endswith("[process]")}
        assert len(rest) == 1, (name, worker_of)
    assert len(set(worker_of.values())) == 2  # both workers had work
    assert not list(tmp_path.glob("starforge-test-groups-*"))  # the controller removed its file
