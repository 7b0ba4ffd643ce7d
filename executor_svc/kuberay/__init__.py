"""The `kuberay` executor kind: one KubeRay RayJob (ray.io/v1) per attempt, through the Kubernetes API.

Registered in executor_svc/registry.py as "kuberay" -> `executor_svc.kuberay:KIND`; the kubernetes
client is imported only when this kind is asked for.
"""

from __future__ import annotations

from typing import Any

from executor_svc.base import Executor
from executor_svc.kuberay.config import HeadConfig, KubeRayConfig, SeriesConfig, TolerationConfig
from executor_svc.kuberay.executor import KubeRayExecutor
from executor_svc.registry import ExecutorKind


async def _create(cfg: Any) -> Executor:
    return await KubeRayExecutor.create(cfg)


KIND = ExecutorKind(name="kuberay", config_class=KubeRayConfig, create=_create)

__all__ = ["KIND", "HeadConfig", "KubeRayConfig", "KubeRayExecutor", "SeriesConfig", "TolerationConfig"]
