"""The `local` executor kind: attempts on this one node, as processes or Docker containers."""

from __future__ import annotations

from typing import Any

from executor_svc.base import Executor
from executor_svc.local.config import DockerConfig, LocalConfig, MountConfig, SeriesConfig
from executor_svc.local.executor import LocalExecutor
from executor_svc.registry import ExecutorKind


async def _create(cfg: Any) -> Executor:
    return await LocalExecutor.create(cfg)


KIND = ExecutorKind(name="local", config_class=LocalConfig, create=_create)

__all__ = ["KIND", "DockerConfig", "LocalConfig", "LocalExecutor", "MountConfig", "SeriesConfig"]
