"""Adapters turn capsule.json's ``run`` section into the training command.

One adapter per ``run.adapter`` value. Each catalog method (trl/sft, verl/grpo, nemo-rl/...) gets an
adapter here that turns the method's config and overrides into the framework's real command line;
the runner around it (process group, logs, metrics, lifecycle) stays the same. An unknown adapter
is a refusal, never a guess.
"""

from __future__ import annotations

from .base import Adapter, AdapterContext, CommandSpec, MetricParser, MetricPoint
from .custom import CustomAdapter
from .nemo_rl import NemoRlAdapter
from .trl import TrlAdapter
from .verl import VerlAdapter

REGISTRY: dict[str, Adapter] = {
    adapter.name: adapter for adapter in (CustomAdapter(), TrlAdapter(), VerlAdapter(), NemoRlAdapter())
}


def get_adapter(name: str) -> Adapter:
    """The adapter registered as ``name``; PrecheckError naming the known ones otherwise."""
    from ..errors import PrecheckError

    try:
        return REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(REGISTRY))
        raise PrecheckError(
            f"capsule.json asks for adapter {name!r}, which this runner does not have (known: {known}); "
            "rebuild the capsule with a runner that has it"
        ) from None


__all__ = ["REGISTRY", "Adapter", "AdapterContext", "CommandSpec", "MetricParser", "MetricPoint", "get_adapter"]
