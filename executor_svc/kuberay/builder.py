"""LaunchRequest -> KubeRay RayJob (apiVersion ray.io/v1) manifest. Pure: no I/O, no clients.

Shape of an attempt on Kubernetes:

- One RayJob `sf-<attempt>` whose entrypoint is `sh /forge/capsule/bootstrap.sh`. The entrypoint
  sets no entrypointNumCpus/Gpus, so Ray runs it on the head node: the head runs the capsule.
- The head pod is the first node of pools[0] (its series' shape and GPUs); pools[0] adds
  nodes-1 workers and every further pool `nodes` workers, one worker group per pool named after
  it (replicas = minReplicas = maxReplicas: a fixed gang, no autoscaling). Workers only join the
  Ray cluster (KubeRay starts `ray start` in them); the training code reaches them through Ray.
- Every pod (head and workers) has an init container, same image, that runs `fetch.py`'s source
  with `python3 -I -c` and fills /forge/capsule and /forge/workspace (and /forge/datasets) from
  the control plane's HTTP blob endpoint (`blob_source.http_url`), digests verified; bootstrap.sh
  verifies everything again before the runner starts. Workers get the files too, so code that Ray
  ships to them finds the same paths.
- Volumes: emptyDir for capsule, workspace, datasets, scratch (per attempt; gone with the pods),
  a memory-backed /dev/shm (NCCL and Ray's object store need more than the default 64 MiB), and
  FORGE_OUT_DIR from `out_volume_claim` with subPath = job id (persistent across attempts).
- submissionMode K8sJobMode (KubeRay's default, set explicitly): a submitter Job runs
  `ray job submit` against the head once it is ready, retries a dashboard that is slow to come up,
  and its pod log follows the entrypoint's output; it works with every KubeRay v1 operator, unlike
  SidecarMode (1.5+). HTTPMode would save that small pod but loses the log and the retries.
- backoffLimit 0: StarForge retries with new attempts; KubeRay retries would run one attempt twice.
- shutdownAfterJobFinishes + ttlSecondsAfterFinished: the Ray cluster (and its GPUs) goes away
  after the job ends; the RayJob object stays, with its status, until Cleanup deletes it.

The capsule environment (docs/ARCHITECTURE.md) with in-pod paths is built in podenv.py.
Secrets (the run token, the blob token, `secret_env`) are never put in labels or annotations;
with `use_secret_for_token` they are not in the RayJob at all but referenced from a per-attempt
Secret. The run token reaches only the head's fetch init container, which writes it to a 0600
file in the scratch emptyDir for the runner (podenv.py).
"""

from __future__ import annotations

import importlib.resources
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starforge_api.executor.v1 import launch_request_pb2 as lr_pb
from starforge_api.job.v1 import job_spec_pb2 as spec_pb

from common.hashing import is_digest
from executor_svc.base import LABEL_EXECUTOR, labels_for, out_key
from executor_svc.kuberay import names
from executor_svc.kuberay.config import KubeRayConfig, SeriesConfig
from executor_svc.kuberay.podenv import (
    CAPSULE_DIR,
    DATASETS_DIR,
    OUT_DIR,
    SCRATCH_DIR,
    WORKSPACE_DIR,
    PodEnv,
    invalid,
    pod_env,
)
from executor_svc.plumbing.pools import PoolRules, Shape, check_pools

GROUP = "ray.io"
VERSION = "v1"
PLURAL = "rayjobs"
KIND = "RayJob"

ENTRYPOINT = f"sh {CAPSULE_DIR}/bootstrap.sh"
SUBMISSION_MODE = "K8sJobMode"
HEAD_CONTAINER = "ray-head"
WORKER_CONTAINER = "ray-worker"
FETCH_CONTAINER = "forge-fetch"
KUBERAY_POOLS = PoolRules(
    kind="kuberay", place="in this kuberay executor's inventory", multi_pool=True, multi_node=True
)

ANN_ATTEMPT = "starforge.dev/attempt-id"
ANN_JOB = "starforge.dev/job-id"
ANN_POOLS = "starforge.dev/pools"
ANN_LABELS = "starforge.dev/labels"
ANN_OUT = "starforge.dev/out-dir"


@dataclass(frozen=True)
class Placement:
    """A pool of the request and where it runs: its series and its worker group."""

    pool: spec_pb.Pool
    series: SeriesConfig
    group: str
    workers: int


@dataclass(frozen=True)
class Built:
    """What launch creates: the RayJob and, with use_secret_for_token, a Secret's data."""

    name: str
    manifest: dict[str, Any]
    secret_name: str
    secret_data: dict[str, str] | None
    out_dir: str


def fetch_source() -> str:
    """The source of the in-pod fetch script (fetch.py), as passed to `python3 -I -c`."""
    return importlib.resources.files("executor_svc.kuberay").joinpath("fetch.py").read_text(encoding="utf-8")


def check_request(request: lr_pb.LaunchRequest, cfg: KubeRayConfig) -> list[Placement]:
    """The request's pools placed on the configured series; InvalidArgument when it can never run."""
    if not request.pools:
        raise invalid("the request has no pools", "pools", "empty")
    if not request.image:
        raise invalid("kuberay runs OCI images: the request names no image", "image", "empty")
    if not request.blob_source.http_url:
        raise invalid(
            "blob_source.http_url is empty: kuberay pods fetch the capsule over HTTP; "
            "give the control plane an HTTP port reachable from the cluster",
            "blob_source.http_url",
            "empty",
        )
    if not is_digest(request.capsule.capsule_digest):
        raise invalid("capsule.capsule_digest is not a sha256 digest", "capsule.capsule_digest", "not a digest")
    for i, pool in enumerate(request.pools):
        if pool.nodes < 1:  # the head is the first pool's first node: a pool has one at least
            raise invalid(f"pool {pool.name!r}: nodes must be >= 1", f"pools[{i}].nodes", "must be >= 1")
    shapes = {s.series: Shape(s.nodes, s.gpus_per_node) for s in cfg.inventory}
    out: list[Placement] = []
    groups: set[str] = set()
    for i, pool in enumerate(check_pools(request.pools, KUBERAY_POOLS, shapes)):
        series = cfg.series(pool.series)
        assert series is not None  # check_pools refused unknown series
        group = names.dns_label(pool.name or f"pool-{i}", 40)
        if group in groups:
            group = names.dns_label(f"{group}-{i}", 40)
        groups.add(group)
        out.append(Placement(pool, series, group, pool.nodes - 1 if i == 0 else pool.nodes))
    return out


def _resources(cpu: str, memory: str, gpu_resource: str = "", gpus: int = 0) -> dict[str, Any]:
    """requests = limits for cpu/memory (Guaranteed QoS; Ray sizes itself from them) + GPU limits."""
    quantities = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
    limits = dict(quantities)
    if gpus:
        limits[gpu_resource] = str(gpus)
    out: dict[str, Any] = {}
    if quantities:
        out["requests"] = dict(quantities)
    if limits:
        out["limits"] = limits
    return out


def _volumes(cfg: KubeRayConfig, with_datasets: bool) -> list[dict[str, Any]]:
    vols: list[dict[str, Any]] = [
        {"name": "forge-capsule", "emptyDir": {}},
        {"name": "forge-workspace", "emptyDir": {}},
        {"name": "forge-scratch", "emptyDir": {}},
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
    ]
    if with_datasets:
        vols.append({"name": "forge-datasets", "emptyDir": {}})
    if cfg.out_volume_claim:
        vols.append({"name": "forge-out", "persistentVolumeClaim": {"claimName": cfg.out_volume_claim}})
    else:
        vols.append({"name": "forge-out", "emptyDir": {}})
    return vols


def _pod_template(
    request: lr_pb.LaunchRequest,
    cfg: KubeRayConfig,
    *,
    series: SeriesConfig,
    container: str,
    env: list[dict[str, Any]],
    fetch_env: list[dict[str, Any]],
    resources: dict[str, Any],
    labels: Mapping[str, str],
    grace: int,
) -> dict[str, Any]:
    with_datasets = len(request.datasets) > 0
    out_mount: dict[str, Any] = {"name": "forge-out", "mountPath": OUT_DIR}
    if cfg.out_volume_claim:
        out_mount["subPath"] = out_key(request)
    mounts: list[dict[str, Any]] = [
        {"name": "forge-capsule", "mountPath": CAPSULE_DIR, "readOnly": True},
        {"name": "forge-workspace", "mountPath": WORKSPACE_DIR},
        {"name": "forge-scratch", "mountPath": SCRATCH_DIR},
        out_mount,
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    fetch_mounts: list[dict[str, Any]] = [
        {"name": "forge-capsule", "mountPath": CAPSULE_DIR},
        {"name": "forge-workspace", "mountPath": WORKSPACE_DIR},
        {"name": "forge-scratch", "mountPath": SCRATCH_DIR},  # the head's run token file
    ]
    if with_datasets:
        mounts.append({"name": "forge-datasets", "mountPath": DATASETS_DIR, "readOnly": True})
        fetch_mounts.append({"name": "forge-datasets", "mountPath": DATASETS_DIR})
    fetch_resources = {k: {r: q for r, q in v.items() if r in ("cpu", "memory")} for k, v in resources.items()}
    fetch_container: dict[str, Any] = {
        "name": FETCH_CONTAINER,
        "image": request.image,
        "imagePullPolicy": cfg.image_pull_policy,
        "command": ["python3", "-I", "-c", fetch_source()],
        "env": fetch_env,
        "volumeMounts": fetch_mounts,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if any(fetch_resources.values()):
        fetch_container["resources"] = {k: v for k, v in fetch_resources.items() if v}
    main: dict[str, Any] = {
        "name": container,
        "image": request.image,
        "imagePullPolicy": cfg.image_pull_policy,
        "env": env,
        "volumeMounts": mounts,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if resources:
        main["resources"] = resources
    spec: dict[str, Any] = {
        "initContainers": [fetch_container],
        "containers": [main],
        "volumes": _volumes(cfg, with_datasets),
        "terminationGracePeriodSeconds": grace + cfg.drain_seconds,
    }
    if series.node_selector:
        spec["nodeSelector"] = dict(series.node_selector)
    if series.tolerations:
        spec["tolerations"] = [t.to_k8s() for t in series.tolerations]
    if cfg.service_account:
        spec["serviceAccountName"] = cfg.service_account
    if cfg.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": n} for n in cfg.image_pull_secrets]
    return {"metadata": {"labels": dict(labels)}, "spec": spec}


def out_dir_for_humans(cfg: KubeRayConfig, job_id: str) -> str:
    if cfg.out_volume_claim:
        return f"pvc {cfg.namespace}/{cfg.out_volume_claim}, subPath {job_id}"
    return "emptyDir in the pods (lost with them; set kuberay.out_volume_claim)"


def build(request: lr_pb.LaunchRequest, cfg: KubeRayConfig) -> Built:
    """The RayJob for `request` (InvalidArgument when this executor can never run it)."""
    placements = check_request(request, cfg)
    name = names.rayjob_name(request.attempt_id)
    secret_name = names.secret_name(request.attempt_id)
    grace = request.stop_grace_seconds if request.stop_grace_seconds > 0 else cfg.default_stop_grace_seconds
    env = pod_env(request, cfg, secret_name, grace)
    raw_labels = labels_for(request)
    labels = {**cfg.extra_labels, **names.safe_labels(raw_labels), LABEL_EXECUTOR: cfg.executor_name}
    out_dir = out_dir_for_humans(cfg, out_key(request))
    annotations = _annotations(request, placements, raw_labels, out_dir)
    pods = _PodParts(env, labels, grace)
    cluster = _cluster_spec(request, cfg, placements, pods)
    manifest = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": name, "namespace": cfg.namespace, "labels": labels, "annotations": annotations},
        "spec": _rayjob_spec(request, cfg, cluster),
    }
    return Built(name=name, manifest=manifest, secret_name=secret_name, secret_data=env.secret, out_dir=out_dir)


@dataclass(frozen=True)
class _PodParts:
    """What every pod template of one RayJob shares."""

    env: PodEnv
    labels: dict[str, str]
    grace: int


def _annotations(
    request: lr_pb.LaunchRequest, placements: list[Placement], raw_labels: dict[str, str], out_dir: str
) -> dict[str, str]:
    """Attempt, job, out dir and pools (and the request's labels when not all are valid k8s labels)."""
    annotations = {
        ANN_ATTEMPT: request.attempt_id,
        ANN_JOB: request.job_id,
        ANN_OUT: out_dir,
        ANN_POOLS: json.dumps(
            [
                {
                    "name": p.pool.name,
                    "series": p.pool.series,
                    "nodes": p.pool.nodes,
                    "gpus_per_node": p.pool.gpus_per_node,
                }
                for p in placements
            ],
            separators=(",", ":"),
        ),
    }
    if names.safe_labels(raw_labels) != raw_labels:
        annotations[ANN_LABELS] = json.dumps(raw_labels, sort_keys=True, separators=(",", ":"))
    return annotations


def _head_group(request: lr_pb.LaunchRequest, cfg: KubeRayConfig, first: Placement, pods: _PodParts) -> dict[str, Any]:
    """The head group: the first pool's first node, sized by `cfg.head` where it says."""
    head_resources = _resources(
        cfg.head.cpu or first.series.cpu,
        cfg.head.memory or first.series.memory,
        first.series.gpu_resource,
        first.pool.gpus_per_node,
    )
    return {
        "rayStartParams": {"dashboard-host": "0.0.0.0", **cfg.head.ray_start_params},
        "template": _pod_template(
            request,
            cfg,
            series=first.series,
            container=HEAD_CONTAINER,
            env=pods.env.head,
            fetch_env=pods.env.head_fetch,
            resources=head_resources,
            labels=pods.labels,
            grace=pods.grace,
        ),
    }


def _worker_groups(
    request: lr_pb.LaunchRequest, cfg: KubeRayConfig, placements: list[Placement], pods: _PodParts
) -> list[dict[str, Any]]:
    """One fixed-size worker group per pool that has nodes besides the head."""
    return [
        {
            "groupName": p.group,
            "replicas": p.workers,
            "minReplicas": p.workers,
            "maxReplicas": p.workers,
            "rayStartParams": {},
            "template": _pod_template(
                request,
                cfg,
                series=p.series,
                container=WORKER_CONTAINER,
                env=pods.env.worker,
                fetch_env=pods.env.fetch,
                resources=_resources(p.series.cpu, p.series.memory, p.series.gpu_resource, p.pool.gpus_per_node),
                labels=pods.labels,
                grace=pods.grace,
            ),
        }
        for p in placements
        if p.workers > 0
    ]


def _cluster_spec(
    request: lr_pb.LaunchRequest, cfg: KubeRayConfig, placements: list[Placement], pods: _PodParts
) -> dict[str, Any]:
    """The RayCluster spec: the head group and the worker groups, no autoscaling."""
    head = _head_group(request, cfg, placements[0], pods)
    workers = _worker_groups(request, cfg, placements, pods)
    cluster: dict[str, Any] = {"rayVersion": cfg.ray_version, "enableInTreeAutoscaling": False, "headGroupSpec": head}
    if workers:
        cluster["workerGroupSpecs"] = workers
    return cluster


def _rayjob_spec(request: lr_pb.LaunchRequest, cfg: KubeRayConfig, cluster: dict[str, Any]) -> dict[str, Any]:
    """The RayJob's spec: the capsule's entrypoint, no retries, the cluster gone when it ends."""
    spec: dict[str, Any] = {
        "entrypoint": ENTRYPOINT,
        "submissionMode": SUBMISSION_MODE,
        "shutdownAfterJobFinishes": True,
        "ttlSecondsAfterFinished": cfg.ttl_seconds_after_finished,
        "backoffLimit": 0,
        "metadata": {"starforge_job_id": request.job_id, "starforge_attempt_id": request.attempt_id},
        "rayClusterSpec": cluster,
    }
    if cfg.pre_running_deadline_seconds > 0:
        spec["preRunningDeadlineSeconds"] = cfg.pre_running_deadline_seconds
    return spec


def attempt_of(obj: Mapping[str, Any]) -> str:
    """The attempt id of a RayJob this executor made (annotation, else label)."""
    meta = obj.get("metadata") or {}
    return str((meta.get("annotations") or {}).get(ANN_ATTEMPT) or (meta.get("labels") or {}).get(ANN_ATTEMPT) or "")


def pools_of(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The pools annotation of a RayJob ([] when missing or unreadable)."""
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(ANN_POOLS, "[]")
    try:
        pools = json.loads(raw)
    except ValueError:
        return []
    return [p for p in pools if isinstance(p, dict)] if isinstance(pools, list) else []
