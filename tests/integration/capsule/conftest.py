"""Fixtures for capsule integration tests: the built capsule and a fake IngestService."""

from __future__ import annotations

import pathlib
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

from capsule.layout import load_manifest

from .fake_ingest import FakeIngest
from .harness import TOKEN

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD_DIR = REPO / "build" / "capsule"


@pytest.fixture(scope="session")
def capsule_manifest() -> dict[str, Any]:
    """Build (or find up to date) build/capsule with the real build command."""
    proc = subprocess.run(
        [sys.executable, "-m", "capsule.build", "--out", str(BUILD_DIR)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, f"capsule build failed:\n{proc.stdout}\n{proc.stderr}"
    return load_manifest(BUILD_DIR)


@pytest.fixture
async def ingest() -> AsyncIterator[FakeIngest]:
    server = FakeIngest(token=TOKEN, attempt_id="jtest0000000001.1")
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
