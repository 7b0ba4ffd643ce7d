"""Session fixture `kube`: a real Kubernetes API server for CustomResources with KubeRay's CRDs.

`shared/k8s/start.sh` (apiextensions-apiserver + etcd, see its README) is started into a temp dir
on free ports; the RayJob and RayCluster CRDs are created with the Python client (no kubectl
needed) and waited for until Established. The fixture yields the kubeconfig path and an
ApiClient. At the end it stops exactly the PIDs start.sh wrote (crdserver.pid, etcd.pid): SIGTERM,
wait, SIGKILL, each only after checking /proc that the PID still runs a binary of this run dir.

shared/k8s is `<repo>/../shared/k8s`, or $STARFORGE_SHARED_K8S. When the server cannot start the
fixture fails with the paths of its logs; nothing is skipped.

There are no Pods and no operator: tests play the KubeRay operator by writing RayJob status
through the status subresource, and the garbage collector by removing finalizers.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from tests.integration.backends.workers import claim_backend

ROOT = pathlib.Path(__file__).resolve().parents[3]
CRDS = ("ray.io_rayjobs.yaml", "ray.io_rayclusters.yaml")
START_TIMEOUT = 60.0
ESTABLISH_TIMEOUT = 60.0


def shared_k8s() -> pathlib.Path:
    return pathlib.Path(os.environ.get("STARFORGE_SHARED_K8S") or ROOT.parent / "shared" / "k8s")


@dataclass
class Kube:
    """A running crdserver with KubeRay's CRDs established."""

    kubeconfig: pathlib.Path
    api: client.ApiClient
    run_dir: pathlib.Path
    server: str

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def logs(self) -> str:
        return f"{self.run_dir / 'crdserver.log'} and {self.run_dir / 'etcd.log'}"


def _free_port_pair() -> tuple[int, int]:
    """(api port, etcd port) with etcd's peer port (etcd + 10) free too."""
    for _ in range(50):
        socks = []
        try:
            api = socket.socket()
            api.bind(("127.0.0.1", 0))
            socks.append(api)
            etcd = socket.socket()
            etcd.bind(("127.0.0.1", 0))
            socks.append(etcd)
            peer = socket.socket()
            peer.bind(("127.0.0.1", etcd.getsockname()[1] + 10))
            socks.append(peer)
            return api.getsockname()[1], etcd.getsockname()[1]
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port pair for crdserver and etcd")


def _alive(pid: int, run_dir: pathlib.Path) -> bool:
    """True while `pid` runs a binary of `run_dir` (never signal a recycled PID)."""
    try:
        cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z" and str(run_dir) in cmdline


def stop_pids(run_dir: pathlib.Path, timeout: float = 10.0) -> None:
    """SIGTERM crdserver and etcd of `run_dir` by their PID files, then SIGKILL what is left."""
    pids = []
    for name in ("crdserver", "etcd"):
        with contextlib.suppress(FileNotFoundError, ValueError):
            pids.append(int((run_dir / f"{name}.pid").read_text().strip()))
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        live = [p for p in pids if _alive(p, run_dir)]
        for pid in live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while live and time.monotonic() < deadline:
            live = [p for p in live if _alive(p, run_dir)]
            time.sleep(0.05)


def apply_crds(api: client.ApiClient, k8s: pathlib.Path) -> None:
    """Create (or replace) KubeRay's CRDs and wait until both are Established."""
    ext = client.ApiextensionsV1Api(api)
    names = []
    for f in CRDS:
        body = yaml.safe_load((k8s / f).read_text())
        names.append(body["metadata"]["name"])
        try:
            ext.create_custom_resource_definition(body)
        except ApiException as exc:
            if exc.status != 409:
                raise
    deadline = time.monotonic() + ESTABLISH_TIMEOUT
    pending = list(names)
    while pending:
        crd = ext.read_custom_resource_definition(pending[0])
        conditions = (crd.status.conditions if crd.status else None) or []
        if any(c.type == "Established" and c.status == "True" for c in conditions):
            pending.pop(0)
            continue
        if time.monotonic() > deadline:
            raise RuntimeError(f"CRD {pending[0]} not Established after {ESTABLISH_TIMEOUT:.0f}s: {conditions}")
        time.sleep(0.05)


@contextlib.contextmanager
def crdserver(run_dir: pathlib.Path) -> Iterator[Kube]:
    """Start crdserver + etcd in `run_dir`, apply the CRDs, yield; stop both by PID."""
    run_dir = run_dir.resolve()
    k8s = shared_k8s()
    start = k8s / "start.sh"
    if not start.is_file():
        pytest.fail(f"{start} not found: set STARFORGE_SHARED_K8S to the shared/k8s directory")
    api_port, etcd_port = _free_port_pair()
    api: client.ApiClient | None = None
    try:
        proc = subprocess.run(
            [str(start), str(run_dir), str(api_port), str(etcd_port)],
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT,
            check=False,
        )
        if proc.returncode != 0:
            pytest.fail(
                f"{start} failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}\n"
                f"logs: {run_dir / 'crdserver.log'}, {run_dir / 'etcd.log'}"
            )
        kubeconfig = pathlib.Path(proc.stdout.split("KUBECONFIG=")[-1].strip())
        api = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
        try:
            apply_crds(api, k8s)
        except Exception as exc:
            pytest.fail(f"applying KubeRay's CRDs failed: {exc}\nlogs: {run_dir / 'crdserver.log'}")
        yield Kube(kubeconfig, api, run_dir, f"https://127.0.0.1:{api_port}")
    finally:
        if api is not None:
            api.close()  # type: ignore[no-untyped-call]
        stop_pids(run_dir)


@pytest.fixture(scope="session")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    """A fresh crdserver with KubeRay's RayJob and RayCluster CRDs established."""
    claim_backend("kube", tmp_path_factory.getbasetemp())
    with crdserver(tmp_path_factory.mktemp("k8s")) as k:
        yield k
