"""Fixtures shared by the integration tests.

Backend session fixtures live in tests/integration/backends/ and are imported here, which
registers them for every integration test. (`pytest_plugins` would be the usual way, but pytest
accepts it only in the top-level tests/conftest.py: in this file it aborts collection.)
"""

from tests.integration.backends.docker import dockerd, python_image
from tests.integration.backends.kube import kube
from tests.integration.backends.slurm import slurm_cluster

__all__ = ["dockerd", "kube", "python_image", "slurm_cluster"]
