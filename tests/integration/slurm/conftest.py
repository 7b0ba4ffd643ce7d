"""Fixtures for the Slurm cluster and client tests: a client and per-test staging directories."""

from __future__ import annotations

import pathlib
import uuid
from collections.abc import AsyncIterator

import pytest

from executor_svc.slurm import SlurmClient
from tests.integration.backends.slurm import ClusterInfo


@pytest.fixture
async def slurm(slurm_cluster: ClusterInfo) -> AsyncIterator[SlurmClient]:
    async with SlurmClient(slurm_cluster.restd_url, user=slurm_cluster.user, token=slurm_cluster.token) as client:
        yield client


@pytest.fixture
def workdir(slurm_cluster: ClusterInfo, request: pytest.FixtureRequest) -> pathlib.Path:
    """A fresh directory in the staging dir: same path on the host and in jobs, writable by jobs."""
    path = pathlib.Path(slurm_cluster.staging_dir) / f"{request.node.name[:40]}-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    path.chmod(0o777)  # jobs run as the cluster's unprivileged user (uid slurm_cluster.uid)
    return path
