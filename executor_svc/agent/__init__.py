"""The `agent` executor kind: attempts placed on forgelet nodes (docs/forgelet.md).

Registered in executor_svc/registry.py as "agent" -> `executor_svc.agent:KIND`.
"""

from __future__ import annotations

from typing import Any

from executor_svc.agent.config import AgentConfig
from executor_svc.agent.executor import AgentExecutor
from executor_svc.base import Executor
from executor_svc.registry import ExecutorKind


async def _create(cfg: Any) -> Executor:
    return await AgentExecutor.create(cfg)


KIND = ExecutorKind(name="agent", config_class=AgentConfig, create=_create)

__all__ = ["KIND", "AgentConfig", "AgentExecutor"]
