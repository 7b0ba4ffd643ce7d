"""`claim_backend` (tests/integration/backends/workers.py): a backend started by one pytest-xdist
worker of a run fails its start on another worker of that run, and only then."""

from __future__ import annotations

import pathlib

import pytest

from tests.integration.backends.workers import claim_backend


def _worker(monkeypatch: pytest.MonkeyPatch, run: pathlib.Path, name: str) -> pathlib.Path:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", name)
    base = run / f"popen-{name}"
    base.mkdir(parents=True, exist_ok=True)
    return base


def test_a_second_worker_starting_the_same_backend_fails_naming_the_group(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    claim_backend("docker", _worker(monkeypatch, tmp_path, "gw0"))
    claim_backend("docker", _worker(monkeypatch, tmp_path, "gw0"))  # the same worker again: fine
    claim_backend("slurm", _worker(monkeypatch, tmp_path, "gw1"))  # another backend: fine
    with pytest.raises(pytest.fail.Exception, match="docker backend was already started by pytest-xdist worker gw0"):
        claim_backend("docker", _worker(monkeypatch, tmp_path, "gw1"))
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["backend-docker", "backend-slurm"]


def test_another_run_and_a_run_without_workers_claim_nothing(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    claim_backend("kube", _worker(monkeypatch, tmp_path / "run-1", "gw0"))
    claim_backend("kube", _worker(monkeypatch, tmp_path / "run-2", "gw1"))  # a run of its own
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    claim_backend("kube", tmp_path / "run-1" / "popen-gw1")  # one process: no check
    assert not (tmp_path / "backend-kube").exists()
