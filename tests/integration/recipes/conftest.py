"""Fixtures of the real-framework recipe tests."""

from __future__ import annotations

import os
import pathlib
import sys

import pytest


@pytest.fixture
def venv_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Process-runtime jobs inherit the executor's PATH: put this venv (python3, trl) first."""
    monkeypatch.setenv("PATH", f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
