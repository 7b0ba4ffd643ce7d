"""Fixtures for executor tests: one real BlobService for the session, and the docker backend."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.integration.backends.docker import dockerd, python_image  # noqa: F401 - session fixtures
from tests.integration.blob_server import BlobServer, blob_server


@pytest.fixture(scope="session")
async def blobs(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[BlobServer]:
    """A real control-plane BlobService (token auth included) on 127.0.0.1:<free>."""
    async with blob_server(tmp_path_factory.mktemp("blobsrv")) as srv:
        yield srv
