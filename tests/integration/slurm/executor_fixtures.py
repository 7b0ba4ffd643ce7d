"""Fixtures and helpers for the slurm executor's tests against the real test cluster.

`slurm_section(info, root)` is the executor's `slurm:` section for the test cluster: its staging
and out dirs live in the cluster's staging dir (the same path on the host and in jobs), jobs run
as the cluster's job user (uid 64101, hence job_uid/job_gid), GPUs are gres `gpu:h100:N`, and
Ray uses loopback addresses only (both nodes are this one host). `slurm_ray` installs Ray into
the cluster's chroot once (tools/slurm/ray.py). Import the fixtures into a test module with
`from .executor_fixtures import ...`.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from common.config import build_dataclass
from executor_svc.slurm import SlurmConfig, SlurmExecutor
from tests.integration.backends.slurm import ClusterInfo
from tests.integration.blob_server import BlobServer, blob_server
from tools.slurm import chroot as slurm_chroot
from tools.slurm import cluster as slurm_cluster_tool
from tools.slurm import ray as slurm_ray_install

# StarForge owners of the tenant tests -> the chroot's tenant users (tools/slurm/chroot.py).
TENANT_A, TENANT_B = sorted(slurm_chroot.TENANT_USERS)
TENANTS = {"alice": TENANT_A, "bob": TENANT_B}


def slurm_section(info: ClusterInfo, root: pathlib.Path, **overrides: Any) -> dict[str, Any]:
    """The `slurm:` section (a plain dict, as YAML would give it) for the test cluster."""
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)
    section: dict[str, Any] = {
        "restd_url": info.restd_url,
        "user": info.user,
        "token": info.token,
        "partition": info.partition,
        "staging_dir": str(root / "staging"),
        "out_dir": str(root / "out"),
        "job_uid": info.uid,
        "job_gid": info.gid,
        "container_runtime": "none",
        "inventory": [
            {
                "series": "h100",
                "nodes": len(info.nodes),
                "gpus_per_node": info.gpus_per_node,
                "gres_type": info.gpu_type,
            }
        ],
        "ray": {"node_ip": "loopback", "object_store_memory_bytes": 80_000_000, "start_timeout_seconds": 240},
        "executor_name": f"test-{uuid.uuid4().hex[:8]}",
    }
    section.update(overrides)
    return section


def tenant_section(info: ClusterInfo, root: pathlib.Path, **tenants: Any) -> dict[str, Any]:
    """`slurm_section` with `tenants` (alice and bob mapped to the chroot's two tenant users):
    submitting as root (SlurmUser), each job as its owner's Unix user, uids from slurmctld."""
    section = slurm_section(info, root, user="root", token=slurm_cluster_tool.token(info.run_dir, "root"))
    del section["job_uid"], section["job_gid"]
    section["tenants"] = {"users": dict(TENANTS)} | tenants
    return section


@pytest.fixture
async def slurm_tenant_executor(slurm_cluster: ClusterInfo, slurm_root: pathlib.Path) -> AsyncIterator[SlurmExecutor]:
    """An executor whose jobs run as their owner's Unix user (`tenant_section`)."""
    ex = await SlurmExecutor.create(make_config(tenant_section(slurm_cluster, slurm_root)))
    try:
        yield ex
    finally:
        await cancel_everything(ex)
        await ex.close()


def make_config(section: dict[str, Any]) -> SlurmConfig:
    return build_dataclass(SlurmConfig, section, "slurm")


@pytest.fixture(scope="session")
def slurm_ray(slurm_cluster: ClusterInfo) -> slurm_ray_install.RayInstall:
    """Ray in the cluster's chroot (installed once, cached under build/)."""
    return slurm_ray_install.ensure_ray()


@pytest.fixture(scope="session")
async def slurm_blobs(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[BlobServer]:
    """A real control-plane BlobService on 127.0.0.1:<free>."""
    async with blob_server(tmp_path_factory.mktemp("slurm-blobs")) as srv:
        yield srv


@pytest.fixture
def slurm_root(slurm_cluster: ClusterInfo) -> pathlib.Path:
    """A fresh directory in the cluster's staging dir for one test's executor."""
    return pathlib.Path(slurm_cluster.staging_dir) / f"ex-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def slurm_executor(slurm_cluster: ClusterInfo, slurm_root: pathlib.Path) -> AsyncIterator[SlurmExecutor]:
    ex = await SlurmExecutor.create(make_config(slurm_section(slurm_cluster, slurm_root)))
    try:
        yield ex
    finally:
        await cancel_everything(ex)
        await ex.close()


async def cancel_everything(ex: SlurmExecutor) -> None:
    """Cancel what a test left in the queue (by this executor's labels: only its own jobs)."""
    for job in await ex._our_jobs():
        await ex.client.cancel(job.job_id)


def cluster_pids(info: ClusterInfo) -> set[int]:
    """PIDs in the test cluster's PID namespace (slurmd, jobs, Ray): whose traffic we police."""
    nsinit = next(p["pid"] for p in _pids(info) if p["name"] == "nsinit")
    ns = os.readlink(f"/proc/{nsinit}/ns/pid")
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/ns/pid") == ns:
                    out.add(int(entry))
            except OSError:
                continue
    return out


def _pids(info: ClusterInfo) -> list[dict[str, Any]]:
    import json

    data = json.loads((pathlib.Path(info.run_dir) / "run" / "pids.json").read_text())
    return list(data["procs"])


_LOOPBACK = re.compile(r"^(127\.\d+\.\d+\.\d+|\[::1\]|\[::ffff:127\.\d+\.\d+\.\d+\]|::1|\*|0\.0\.0\.0|\[::\]):")


def foreign_connections(pids: set[int]) -> list[str]:
    """`ss` lines of TCP/UDP sockets of `pids` whose peer is not a loopback address."""
    out = subprocess.run(["ss", "-tunpH"], capture_output=True, text=True, check=True).stdout
    bad = []
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 6:
            continue
        peer = fields[5]
        owners = {int(p) for p in re.findall(r"pid=(\d+)", line)}
        if owners & pids and not _LOOPBACK.match(peer):
            bad.append(line)
    return bad


def staged_files(root: pathlib.Path) -> Iterator[pathlib.Path]:
    yield from (p for p in root.rglob("*") if p.is_file())
