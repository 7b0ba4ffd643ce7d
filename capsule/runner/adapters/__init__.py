"""Adapters turn capsule.json's ``run`` section into the training command.

One adapter per ``run.adapter`` value. Each catalog method (trl/sft, verl/grpo, nemo-rl/...) gets an
adapter here that turns the method's config and overrides into the framework's real command line;
the runner around it (process group, logs, metrics, lifecycle) stays the same. An unknown adapter
is a refusal, never a guess.

An attempt uses one adapter, so only that one is imported (``get_adapter``): the framework
adapters (their config readers, hydra overrides, stage files) are a third of the runner's imports
before the command starts, which a custom job never needs.
"""

from __future__ import annotations

import importlib

from .base import Adapter, AdapterContext, CommandSpec, MetricParser, MetricPoint

# run.adapter -> (module in this package, its Adapter class); each class's `name` is the key.
REGISTRY: dict[str, tuple[str, str]] = {
    "custom": ("custom", "CustomAdapter"),
    "trl": ("trl", "TrlAdapter"),
    "verl": ("verl", "VerlAdapter"),
    "nemo-rl": ("nemo_rl", "NemoRlAdapter"),
}
_LOADED: dict[str, Adapter] = {}


def get_adapter(name: str) -> Adapter:
    """The adapter registered as ``name`` (imported on first use); PrecheckError naming the known ones otherwise."""
    from ..errors import PrecheckError

    if name in _LOADED:
        return _LOADED[name]
    try:
        module, cls = REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(REGISTRY))
        raise PrecheckError(
            f"capsule.json asks for adapter {name!r}, which this runner does not have (known: {known}); "
            "rebuild the capsule with a runner that has it"
        ) from None
    adapter: Adapter = getattr(importlib.import_module(f".{module}", __name__), cls)()
    _LOADED[name] = adapter
    return adapter


__all__ = ["REGISTRY", "Adapter", "AdapterContext", "CommandSpec", "MetricParser", "MetricPoint", "get_adapter"]
