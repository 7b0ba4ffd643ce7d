"""Fixtures for the security tests: each plays a hostile tenant (a normal user's personal token, or
the code inside that user's own job) against real processes and real backends.

The backend session fixtures are the integration suite's (tests/integration/backends/); importing
them here registers them for every security test.
"""

from tests.integration.backends.docker import dockerd, python_image
from tests.integration.backends.kube import kube
from tests.integration.backends.slurm import slurm_cluster

__all__ = ["dockerd", "kube", "python_image", "slurm_cluster"]
