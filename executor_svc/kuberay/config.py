"""Configuration of the `kuberay` executor (the `kuberay:` section of the executor's config file).

    kuberay:
      kubeconfig: /etc/starforge/kubeconfig     # empty: in-cluster service account
      namespace: training
      out_volume_claim: starforge-out           # RWX PVC; FORGE_OUT_DIR = <claim>/<job id>
      ray_version: "2.60.0"
      use_secret_for_token: true
      inventory:
        - {series: h200, nodes: 4, gpus_per_node: 8, cpu: "96", memory: 1600Gi,
           node_selector: {nvidia.com/gpu.product: NVIDIA-H200}}
        - {series: cpu, nodes: 8, cpu: "8", memory: 32Gi}

Everything the executor asks of the cluster is declared here: a pool whose series is not in the
inventory, or that needs more GPUs per node or more nodes than it lists, is refused at Launch
(InvalidArgument), never sent to another series. Checks are made when the file is loaded, so a
misconfigured executor does not start.
"""

from __future__ import annotations

import dataclasses
import re

from common.config import ConfigError
from executor_svc.kuberay.names import safe_labels

PULL_POLICIES = ("Always", "IfNotPresent", "Never")
TOLERATION_OPERATORS = ("Equal", "Exists")
TOLERATION_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")
# Kubernetes resource quantity ("8", "500m", "64Gi", "1.5e3").
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
RAY_VERSION = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+([.a-z0-9-]*)$")


@dataclasses.dataclass(frozen=True)
class TolerationConfig:
    """A pod toleration (e.g. for the `nvidia.com/gpu` taint GPU node pools usually carry)."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def to_k8s(self) -> dict[str, str]:
        out = {"operator": self.operator}
        for name in ("key", "value", "effect"):
            if getattr(self, name):
                out[name] = getattr(self, name)
        return out


@dataclasses.dataclass(frozen=True)
class SeriesConfig:
    """One GPU series of the cluster: how many nodes, their shape, and how pods land on them.

    `cpu` and `memory` are requested (and limited) for every pod of the series: size them to
    what a node can give one pod. `gpu_resource` is the extended resource the device plugin
    advertises. `nodes` is the inventory reported by describe(); a pool needing more nodes is
    refused because it could never be scheduled.
    """

    series: str
    nodes: int = 1
    gpus_per_node: int = 0
    cpu: str = ""
    memory: str = ""
    gpu_resource: str = "nvidia.com/gpu"
    node_selector: dict[str, str] = dataclasses.field(default_factory=dict)
    tolerations: list[TolerationConfig] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class HeadConfig:
    """The Ray head pod. It is the first node of pools[0] and runs the capsule, so it gets that
    series' GPUs and shape; `cpu`/`memory` override the series' values when set (the head also
    hosts Ray's GCS and dashboard)."""

    cpu: str = ""
    memory: str = ""
    ray_start_params: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class KubeRayConfig:
    """The `kuberay:` section."""

    # kubeconfig file; empty: the in-cluster service account (KUBERNETES_SERVICE_HOST must be set).
    kubeconfig: str = ""
    # Context in the kubeconfig; empty: its current-context.
    context: str = ""
    namespace: str = "default"
    # Names this executor's RayJobs (label starforge.dev/executor) so two executors sharing a
    # namespace never list, observe or clean up each other's attempts.
    executor_name: str = "kuberay"
    # PersistentVolumeClaim for FORGE_OUT_DIR (ReadWriteMany for multi-node jobs), mounted with
    # subPath = job id so checkpoints survive attempts. Empty: an emptyDir that dies with the
    # pods (no PAUSE capability; a warning is logged).
    out_volume_claim: str = ""
    # rayClusterSpec.rayVersion; training images must contain this Ray (and python3).
    ray_version: str = "2.60.0"
    head: HeadConfig = dataclasses.field(default_factory=HeadConfig)
    inventory: list[SeriesConfig] = dataclasses.field(default_factory=lambda: [SeriesConfig(series="cpu")])
    # Service account of every pod; empty: the namespace's default.
    service_account: str = ""
    image_pull_policy: str = "IfNotPresent"
    image_pull_secrets: list[str] = dataclasses.field(default_factory=list)
    # Put FORGE_INGEST_TOKEN, the blob token and the request's secret_env in a Secret per attempt
    # (needs the core API: real clusters). False: plain env in the pod template, readable by
    # anyone who can read RayJobs in the namespace.
    use_secret_for_token: bool = False
    # Seconds KubeRay keeps the Ray cluster after the job finished (pods, logs), then deletes it.
    ttl_seconds_after_finished: int = 300
    # KubeRay fails the RayJob (reason PreRunningDeadlineExceeded) when it is not running after
    # this many seconds: image pulls, no capacity, a capsule fetch that keeps failing. 0: never.
    pre_running_deadline_seconds: int = 0
    # Seconds between SIGTERM and SIGKILL of the training command when the request gives none.
    default_stop_grace_seconds: int = 10
    # Extra seconds pods get on deletion beyond the stop grace, for the runner to drain its journal.
    drain_seconds: int = 30
    # Labels added to every RayJob (e.g. kueue.x-k8s.io/queue-name).
    extra_labels: dict[str, str] = dataclasses.field(default_factory=dict)
    # Seconds for one API call; the watch re-connects every watch_timeout_seconds.
    api_timeout_seconds: float = 30.0
    watch_timeout_seconds: int = 300

    def __post_init__(self) -> None:
        _check(self)

    def series(self, name: str) -> SeriesConfig | None:
        return next((s for s in self.inventory if s.series == name), None)


def _quantity(value: str, where: str) -> None:
    if value and not QUANTITY.match(value):
        raise ConfigError(f"{where}: {value!r} is not a Kubernetes quantity (e.g. '8', '500m', '64Gi')")


def _check(cfg: KubeRayConfig) -> None:
    if not DNS_LABEL.match(cfg.namespace):
        raise ConfigError(f"kuberay.namespace: {cfg.namespace!r} is not a DNS-1123 label")
    if not DNS_LABEL.match(cfg.executor_name):
        raise ConfigError(f"kuberay.executor_name: {cfg.executor_name!r} is not a DNS-1123 label")
    if cfg.out_volume_claim and not DNS_SUBDOMAIN.match(cfg.out_volume_claim):
        raise ConfigError(f"kuberay.out_volume_claim: {cfg.out_volume_claim!r} is not a valid claim name")
    if not RAY_VERSION.match(cfg.ray_version):
        raise ConfigError(f"kuberay.ray_version: {cfg.ray_version!r} is not a Ray version like '2.60.0'")
    if cfg.image_pull_policy not in PULL_POLICIES:
        raise ConfigError(
            f"kuberay.image_pull_policy: {cfg.image_pull_policy!r} is not one of {', '.join(PULL_POLICIES)}"
        )
    for name in ("ttl_seconds_after_finished", "pre_running_deadline_seconds", "default_stop_grace_seconds"):
        if getattr(cfg, name) < 0:
            raise ConfigError(f"kuberay.{name} must be >= 0")
    if cfg.drain_seconds < 0 or cfg.api_timeout_seconds <= 0 or cfg.watch_timeout_seconds <= 0:
        raise ConfigError("kuberay.drain_seconds must be >= 0; api/watch timeouts must be > 0")
    if safe_labels(cfg.extra_labels) != cfg.extra_labels:
        raise ConfigError("kuberay.extra_labels: keys and values must be valid Kubernetes labels")
    _quantity(cfg.head.cpu, "kuberay.head.cpu")
    _quantity(cfg.head.memory, "kuberay.head.memory")
    if not cfg.inventory:
        raise ConfigError("kuberay.inventory: list at least one series")
    seen: set[str] = set()
    for s in cfg.inventory:
        where = f"kuberay.inventory[{s.series}]"
        if not s.series or s.series in seen:
            raise ConfigError(f"{where}: series names must be non-empty and listed once")
        seen.add(s.series)
        if s.nodes < 1 or s.gpus_per_node < 0:
            raise ConfigError(f"{where}: nodes must be >= 1 and gpus_per_node >= 0")
        _quantity(s.cpu, f"{where}.cpu")
        _quantity(s.memory, f"{where}.memory")
        for i, t in enumerate(s.tolerations):
            if t.operator not in TOLERATION_OPERATORS or t.effect not in TOLERATION_EFFECTS:
                raise ConfigError(
                    f"{where}.tolerations[{i}]: operator must be one of {TOLERATION_OPERATORS}, "
                    f"effect one of {TOLERATION_EFFECTS[1:]} or empty"
                )
            if t.operator == "Exists" and t.value:
                raise ConfigError(f"{where}.tolerations[{i}]: operator Exists takes no value")
