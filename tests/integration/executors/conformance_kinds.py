"""One harness per executor kind for the conformance suite (test_conformance.py), on its real backend.

Each `KindHarness` makes the kind's executor in this process, builds LaunchRequests it can run,
brings an attempt to RUNNING the way its backend does (a real process, container or Slurm job;
for kuberay, the test plays the KubeRay operator: the API server has no pods), restarts the
executor over the same state, and restarts the backend where this machine allows it:

- local (process runtime): the attempts are the backend; there is no daemon to restart.
- local (docker): dockerd is the session's, shared by every docker test; a restart without
  live-restore kills every container of the session, and the session fixture would stop a
  dead PID at the end. Not restarted here.
- agent: the node's forgelet is stopped (SIGTERM) and started again on its config and port.
- kuberay: the API server and its etcd are stopped and started again on the same ports and data.
- slurm: slurmctld runs under the test cluster's namespace init (tools/slurm/nsinit.py), which
  starts each daemon once and cannot restart one; restarting the cluster would lose every job.
  Not restarted here.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import pathlib
import subprocess
import time
from collections.abc import AsyncIterator
from typing import Any

from starforge_api.executor.v1 import launch_request_pb2 as lr_pb
from starforge_api.job.v1 import job_spec_pb2 as spec_pb
from starforge_api.job.v1 import job_state_pb2 as st

from common.config import build_dataclass
from executor_svc.agent.config import AgentConfig
from executor_svc.agent.executor import AgentExecutor
from executor_svc.base import Executor, Observation
from executor_svc.kuberay import names
from executor_svc.kuberay.config import KubeRayConfig
from executor_svc.kuberay.executor import KubeRayExecutor
from executor_svc.local.config import LocalConfig
from executor_svc.local.executor import LocalExecutor
from executor_svc.slurm import SlurmExecutor
from tests.integration.backends import kube as kube_backend
from tests.integration.backends.docker import DockerEngine
from tests.integration.backends.kube import Kube
from tests.integration.backends.slurm import ClusterInfo
from tests.integration.blob_server import BlobServer
from tests.integration.executors.launch_requests import launch_request, shell_capsule, wait_for
from tests.integration.forgelet.fleet import ForgeletProcess, agent_console, agent_section
from tests.integration.kuberay.conftest import Operator
from tests.integration.slurm.executor_fixtures import cancel_everything, make_config, slurm_section
from tests.unit.kuberay.requests import config as kuberay_config
from tests.unit.kuberay.requests import pool as kuberay_pool
from tests.unit.kuberay.requests import request as kuberay_request

# The capsule every running kind runs: it notes whether a checkpoint was there already (an earlier
# attempt's), writes its own (whole, by rename: a test reads it as soon as the start is marked),
# then marks its start in FORGE_OUT_DIR (so a second start would show) and runs until the test
# releases it.
START = (
    '[ -e "$FORGE_OUT_DIR/checkpoint" ] && echo "$FORGE_ATTEMPT_ID" >> "$FORGE_OUT_DIR/found"\n'
    'echo kept > "$FORGE_OUT_DIR/checkpoint.tmp" && mv "$FORGE_OUT_DIR/checkpoint.tmp" "$FORGE_OUT_DIR/checkpoint"\n'
    'echo "$FORGE_ATTEMPT_ID" >> "$FORGE_OUT_DIR/starts"\n'
)
UNTIL_RELEASED = 'while [ ! -e "$FORGE_OUT_DIR/release" ]; do sleep 0.2; done\n'
RUN_TIMEOUT = 180.0  # a Slurm job or a container on a busy 2-core machine


class KindHarness(abc.ABC):
    """One executor kind on its backend (see the module docstring)."""

    name: str
    backend_restart: str  # what `restart_backend` restarts, or why it cannot be restarted here
    ex: Executor

    @abc.abstractmethod
    async def start(self) -> Executor:
        """A new executor over the kind's state and configuration."""

    async def restart_executor(self) -> Executor:
        await self.ex.close()
        self.ex = await self.start()
        return self.ex

    @abc.abstractmethod
    def request(self, *, job_id: str | None = None, attempt_number: int = 1, pools: int = 1) -> lr_pb.LaunchRequest:
        """A request this kind can run (`pools` > 1: several pools, for MULTI_POOL)."""

    async def until_running(self, attempt_id: str) -> Observation:
        return await wait_for(self.ex, attempt_id, st.JOB_STATE_RUNNING, timeout=RUN_TIMEOUT)

    async def until_started(self, request: lr_pb.LaunchRequest, launched: str) -> Observation:
        """RUNNING, and (where FORGE_OUT_DIR is on this host) its capsule has marked its start."""
        obs = await self.until_running(request.attempt_id)
        out = self.out_dir(request, launched)
        if out is None:
            return obs
        deadline = time.monotonic() + RUN_TIMEOUT
        while request.attempt_id not in _lines(out / "starts"):
            assert time.monotonic() < deadline, f"{request.attempt_id} never started: {obs}"
            await asyncio.sleep(0.1)
        return obs

    @abc.abstractmethod
    def out_dir(self, request: lr_pb.LaunchRequest, launched: str) -> pathlib.Path | None:
        """FORGE_OUT_DIR as this host sees it (`launched`: LaunchResult.out_dir); None: not here."""

    async def release(self, request: lr_pb.LaunchRequest, launched: str) -> Observation:
        """Let the attempt end by itself (its capsule exits 0) and wait until it ended."""
        path = self.out_dir(request, launched)
        assert path is not None
        path.joinpath("release").touch()
        return await wait_for(self.ex, request.attempt_id, timeout=RUN_TIMEOUT)

    async def restart_backend(self) -> None:
        raise NotImplementedError(self.backend_restart)

    async def close(self) -> None:
        await self.ex.close()


class LocalHarness(KindHarness):
    def __init__(self, root: pathlib.Path, blobs: BlobServer, docker: DockerEngine | None, image: str) -> None:
        self.name = "local-docker" if docker else "local-process"
        self.backend_restart = (
            "dockerd is shared by the session's docker tests (see conformance_kinds.py)"
            if docker
            else "the process runtime has no daemon: its attempts are the backend"
        )
        section: dict[str, Any] = {
            "state_dir": str(root / "state"),
            "runtime": "docker" if docker else "process",
            "inventory": [{"series": "cpu", "slots": 4}],
            "default_stop_grace_seconds": 2,
        }
        if docker:
            section["docker"] = {"base_url": docker.base_url}
        self.cfg = build_dataclass(LocalConfig, section, "local")
        self.blobs, self.image = blobs, image

    async def start(self) -> Executor:
        return await LocalExecutor.create(self.cfg)

    def request(self, *, job_id: str | None = None, attempt_number: int = 1, pools: int = 1) -> lr_pb.LaunchRequest:
        return launch_request(
            self.blobs,
            shell_capsule(START + UNTIL_RELEASED),
            job_id=job_id,
            attempt_number=attempt_number,
            image=self.image,
            pools=[spec_pb.Pool(name=f"p{i}", series="cpu", nodes=1) for i in range(pools)],
        )

    def out_dir(self, request: lr_pb.LaunchRequest, launched: str) -> pathlib.Path | None:
        return pathlib.Path(launched)


class SlurmHarness(KindHarness):
    name = "slurm"
    backend_restart = "slurmctld runs under the test cluster's namespace init, which cannot restart it"

    def __init__(self, info: ClusterInfo, root: pathlib.Path, blobs: BlobServer) -> None:
        self.cfg = make_config(slurm_section(info, root))
        self.blobs = blobs

    async def start(self) -> Executor:
        return await SlurmExecutor.create(self.cfg)

    def request(self, *, job_id: str | None = None, attempt_number: int = 1, pools: int = 1) -> lr_pb.LaunchRequest:
        return launch_request(
            self.blobs,
            shell_capsule(START + UNTIL_RELEASED),
            job_id=job_id,
            attempt_number=attempt_number,
            pools=[spec_pb.Pool(name=f"p{i}", series="h100", nodes=1) for i in range(pools)],
        )

    def out_dir(self, request: lr_pb.LaunchRequest, launched: str) -> pathlib.Path | None:
        return pathlib.Path(launched)  # the shared file system: the same path here and on the nodes

    async def close(self) -> None:
        assert isinstance(self.ex, SlurmExecutor)
        await cancel_everything(self.ex)
        await self.ex.close()


class KubeRayHarness(KindHarness):
    name = "kuberay"
    backend_restart = "the Kubernetes API server and its etcd, on the same ports and data"

    def __init__(self, kube: Kube, namespace: str, **overrides: Any) -> None:
        self.kube = kube
        self.cfg: KubeRayConfig = kuberay_config(kubeconfig=str(kube.kubeconfig), namespace=namespace, **overrides)
        self.operator = Operator(kube, namespace)

    async def start(self) -> Executor:
        ex = await KubeRayExecutor.create(self.cfg)
        assert await asyncio.to_thread(ex.watch.wait_synced, 30), ex.watch.last_error
        return ex

    def request(self, *, job_id: str | None = None, attempt_number: int = 1, pools: int = 1) -> lr_pb.LaunchRequest:
        return kuberay_request(
            [kuberay_pool("cpu", name=f"p{i}") for i in range(pools)], job_id=job_id, attempt_number=attempt_number
        )

    async def until_running(self, attempt_id: str) -> Observation:
        """The API server runs no pods: the test plays the KubeRay operator and says it runs."""
        name = names.rayjob_name(attempt_id)
        await asyncio.to_thread(self.operator.status, name, jobDeploymentStatus="Running", jobStatus="RUNNING")
        return await super().until_running(attempt_id)

    async def release(self, request: lr_pb.LaunchRequest, launched: str) -> Observation:
        name = names.rayjob_name(request.attempt_id)
        await asyncio.to_thread(self.operator.status, name, jobDeploymentStatus="Complete", jobStatus="SUCCEEDED")
        return await wait_for(self.ex, request.attempt_id, timeout=RUN_TIMEOUT)

    def out_dir(self, request: lr_pb.LaunchRequest, launched: str) -> pathlib.Path | None:
        return None  # a PersistentVolumeClaim in the cluster, which the executor never creates or deletes

    async def restart_backend(self) -> None:
        await asyncio.to_thread(restart_crdserver, self.kube)


class AgentHarness(KindHarness):
    name = "agent"
    backend_restart = "the node's forgelet, on its config, state dir and port"

    def __init__(self, root: pathlib.Path, blobs: BlobServer, control: str, node: ForgeletProcess, image: str) -> None:
        section = agent_section(root, control, state_dir=str(root / "agent-inproc"))
        self.cfg = build_dataclass(AgentConfig, section, "agent")
        self.blobs, self.node, self.image = blobs, node, image

    async def start(self) -> Executor:
        return await AgentExecutor.create(self.cfg)

    def request(self, *, job_id: str | None = None, attempt_number: int = 1, pools: int = 1) -> lr_pb.LaunchRequest:
        return launch_request(
            self.blobs,
            shell_capsule(START + UNTIL_RELEASED),
            job_id=job_id,
            attempt_number=attempt_number,
            image=self.image,
            pools=[spec_pb.Pool(name=f"p{i}", series="h200", nodes=1, gpus_per_node=1) for i in range(pools)],
        )

    def out_dir(self, request: lr_pb.LaunchRequest, launched: str) -> pathlib.Path | None:
        # The node's local executor keeps it in its state dir; the node is this host.
        return self.node.state_dir / "out" / request.job_id

    async def restart_backend(self) -> None:
        await asyncio.to_thread(self.node.stop)
        await asyncio.to_thread(self.node.start)


def _lines(path: pathlib.Path) -> list[str]:
    try:
        return path.read_text().split()
    except FileNotFoundError:
        return []


def restart_crdserver(kube: Kube) -> None:
    """Stop the API server and etcd by PID and start both again on the same ports and etcd data."""
    run_dir = kube.run_dir
    etcd_pid = int((run_dir / "etcd.pid").read_text().strip())
    cmdline = pathlib.Path(f"/proc/{etcd_pid}/cmdline").read_bytes().decode().split("\0")
    client_urls = cmdline[cmdline.index("--listen-client-urls") + 1]
    etcd_port = client_urls.rsplit(":", 1)[1]
    api_port = kube.server.rsplit(":", 1)[1]
    kube_backend.stop_pids(run_dir)
    start = kube_backend.shared_k8s() / "start.sh"
    proc = subprocess.run(
        [str(start), str(run_dir), api_port, etcd_port], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, f"the API server did not come back: {proc.stderr[-2000:]} ({kube.logs()})"


@contextlib.asynccontextmanager
async def agent_harness(
    root: pathlib.Path, blobs: BlobServer, engine: DockerEngine, image: str
) -> AsyncIterator[AgentHarness]:
    """A console with an agent fleet of one forgelet node, and an agent executor in this process."""
    async with agent_console(root, engine, nodes=("n1",)) as (c, fleet):
        yield AgentHarness(root, blobs, c.address, fleet["n1"], image)
