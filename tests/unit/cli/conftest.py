"""Fixtures for the CLI unit tests: an isolated environment and a committed git lab in tmp_path."""

from __future__ import annotations

import os
import pathlib

import pytest

from tests.unit.cli.helpers import make_lab


@pytest.fixture(autouse=True)
def isolated_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """No test reads the developer's config, token or git identity."""
    home = tmp_path_factory.mktemp("home")
    for var in list(os.environ):
        if var.startswith("STARFORGE_") or var.startswith("GIT_"):
            monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.setenv("USER", "tester")
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Test")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "test@example.com")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "Test")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "test@example.com")
    monkeypatch.setenv("COLUMNS", "200")
    return home


@pytest.fixture
def lab(tmp_path: pathlib.Path) -> pathlib.Path:
    return make_lab(tmp_path / "lab")
