"""The Slurm test cluster itself: comes up ready, runs jobs in its staging dir, stops completely."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator

import pytest
from starforge_api.job.v1 import job_state_pb2 as st

from executor_svc.slurm import BatchJob, SlurmClient
from tests.integration.backends.slurm import ClusterInfo
from tools.slurm import cluster, config, probes, procs
from tools.slurm.errors import ClusterError

from .helpers import wait_for_state

pytestmark = pytest.mark.slurm
REPO = pathlib.Path(__file__).resolve().parents[3]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tools.slurm.cluster", *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )


@pytest.fixture(params=["checkout", "tmp"])
def repo_run_dir(request: pytest.FixtureRequest) -> Iterator[pathlib.Path]:
    """A run dir in the checkout, and one under the system's temporary directory (where a checkout
    cloned there keeps it): its mount point is then made inside the cluster's private /tmp, which
    the host never sees."""
    base = REPO / "build" if request.param == "checkout" else pathlib.Path(tempfile.gettempdir())
    path = base / f"slurm-test-{uuid.uuid4().hex[:8]}"
    yield path
    cluster.stop(path)  # a no-op when the test stopped it
    shutil.rmtree(path, ignore_errors=True)


def _seen_by_daemons(namespace: str, chroot: str, path: pathlib.Path) -> bool:
    """Whether the cluster's chrooted daemons see `path` as the host's directory of that name.

    Looked at through /proc/PID/root of a daemon, which resolves in the daemon's own mount
    namespace: a mount point inside the cluster's private /tmp is invisible from the host's view
    of the chroot.
    """
    for pid in procs.members_of(namespace):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/root") == chroot:
                return os.path.samefile(f"/proc/{pid}/root{path}", path)
    return False


def test_cluster_comes_up_with_two_idle_nodes(slurm_cluster: ClusterInfo) -> None:
    deadline = time.monotonic() + 15  # jobs of earlier tests may still be completing
    while True:
        try:
            states = probes.nodes_idle(slurm_cluster.restd_url, slurm_cluster.user, slurm_cluster.token, ("n1", "n2"))
            break
        except probes.NotReady:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    assert states == {"n1": ["IDLE"], "n2": ["IDLE"]}
    assert slurm_cluster.slurm_version.startswith("24.11")
    assert slurm_cluster.nodes == ["n1", "n2"]
    assert slurm_cluster.partition == "main"
    assert slurm_cluster.restd_url.startswith("http://127.0.0.1:")
    current = cluster.status(slurm_cluster.run_dir)
    assert current["running"], current
    assert set(current["processes"]) == {"unshare", "nsinit", "slurmctld", "slurmd-n1", "slurmd-n2", "slurmrestd"}
    staging = pathlib.Path(slurm_cluster.staging_dir)
    assert stat.S_IMODE(staging.stat().st_mode) == 0o1777
    for name, path in slurm_cluster.logs.items():
        if not name.endswith(".out"):
            assert pathlib.Path(path).is_file(), name


def test_status_cli_reports_the_running_cluster(slurm_cluster: ClusterInfo) -> None:
    result = cli("status", slurm_cluster.run_dir)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["info"]["restd_url"] == slurm_cluster.restd_url


async def test_cli_start_and_stop_kill_everything_including_running_jobs(repo_run_dir: pathlib.Path) -> None:
    started = cli("start", str(repo_run_dir))
    assert started.returncode == 0, started.stderr
    info = ClusterInfo(**json.loads(started.stdout))
    assert info.start_seconds < 30
    assert cli("status", str(repo_run_dir)).returncode == 0
    again = cli("start", str(repo_run_dir))
    assert again.returncode == 1
    assert "already runs" in again.stderr

    async with SlurmClient(info.restd_url, user=info.user, token=info.token) as client:
        job = BatchJob(name="orphan", script="#!/bin/sh\nsleep 600\n", working_directory=info.staging_dir)
        submitted = await client.submit(job)
        await wait_for_state(client, submitted.job_id, {st.JOB_STATE_RUNNING})

    record = json.loads(config.Layout(repo_run_dir).pids_file.read_text())
    namespace = record["namespace"]
    members = procs.members_of(namespace)
    assert len(members) > 5, "the daemons plus the job's slurmstepd and sleep"
    assert _seen_by_daemons(namespace, info.chroot, repo_run_dir)
    # the mount point as the host sees it (none when it was made in the cluster's private /tmp)
    mountpoint = pathlib.Path(info.chroot + str(repo_run_dir))
    assert mountpoint.is_dir() == (not repo_run_dir.is_relative_to(tempfile.gettempdir()))

    stopped = cli("stop", str(repo_run_dir))
    assert stopped.returncode == 0, stopped.stderr
    assert procs.members_of(namespace) == []
    assert not any(procs.start_time(pid) is not None and procs.pid_namespace(pid) == namespace for pid in members)
    assert not mountpoint.exists(), "the mount point made in the cached chroot is removed again"
    assert os.listdir(info.chroot + "/tmp") == [], "the chroot's /tmp was private to the cluster"
    assert cli("status", str(repo_run_dir)).returncode == 3
    assert cli("stop", str(repo_run_dir)).returncode == 0, "stopping a stopped cluster is a no-op"


def test_failed_start_cleans_up_and_names_the_logs(tmp_path: pathlib.Path) -> None:
    run_dir = tmp_path / "doomed"
    with pytest.raises(ClusterError) as failed:
        cluster.start(run_dir, timeout=0.01)  # no cluster is ready in 10 ms
    message = str(failed.value)
    assert "did not start" in message
    assert str(run_dir / "log") in message
    assert not cluster.status(run_dir)["running"]
    assert cluster.status(run_dir)["processes"] == {}
