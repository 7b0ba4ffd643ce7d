"""Session fixture `slurm_cluster`: a real Slurm 24.11 test cluster (tools/slurm), stopped by PID.

The cluster runs in a fresh directory under pytest's tmp dir; the Debian 13 chroot it runs from is
cached in build/slurm-chroot (built on first use, ~50 s). If it cannot start, every test that
uses it fails with the daemons' log paths and last lines; nothing is skipped. The cluster dies
with the session even when pytest itself is killed (PR_SET_PDEATHSIG on its unshare).

Development shortcut: start a cluster once (`python -m tools.slurm.cluster start build/slurm-dev`)
and set STARFORGE_SLURM_RUN_DIR=build/slurm-dev; the session then uses it and leaves it running.

Register it from a conftest with `from tests.integration.backends.slurm import slurm_cluster`
(or with `pytest_plugins = ["tests.integration.backends.slurm"]` in the top-level tests/conftest.py;
pytest refuses `pytest_plugins` in any other conftest).
"""

from __future__ import annotations

import os
import pathlib
import sys
from collections.abc import Iterator

import pytest

from tests.integration.backends.workers import claim_backend
from tools.slurm import cluster
from tools.slurm.errors import ClusterError

ClusterInfo = cluster.ClusterInfo
REUSE_ENV = "STARFORGE_SLURM_RUN_DIR"


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[cluster.ClusterInfo]:
    """A running two-node cluster: `restd_url`, `user` + `token`, `staging_dir`, `partition`, ..."""
    reuse = os.environ.get(REUSE_ENV)
    if reuse:
        try:
            yield cluster.load_info(pathlib.Path(reuse))
        except ClusterError as exc:
            pytest.fail(f"{REUSE_ENV}={reuse}: {exc}", pytrace=False)
        return
    claim_backend("slurm", tmp_path_factory.getbasetemp())
    run_dir = tmp_path_factory.mktemp("slurm")
    try:
        info = cluster.start(
            run_dir,
            die_with_caller=True,  # a session killed with SIGKILL takes its cluster along
            log=lambda message: print(f"slurm: {message}", file=sys.stderr),
        )
    except ClusterError as exc:
        pytest.fail(f"the Slurm test cluster did not start: {exc}", pytrace=False)
    try:
        yield info
    finally:
        cluster.stop(run_dir)
