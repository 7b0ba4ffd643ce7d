"""Executor kinds by name: `--kind NAME` -> its configuration class and factory.

A kind is registered with one line in `KINDS`: its name and `"<module>:<attribute>"` naming an
`ExecutorKind` in the kind's package. Modules are imported only when their kind is asked for, so
a kind's heavy dependencies (the kubernetes client) never load in another kind's process.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from executor_svc.base import Executor

KINDS: dict[str, str] = {
    "local": "executor_svc.local:KIND",
    "kuberay": "executor_svc.kuberay:KIND",
    "slurm": "executor_svc.slurm:KIND",
    "agent": "executor_svc.agent:KIND",
}


@dataclass(frozen=True)
class ExecutorKind:
    """What the service process needs to know about a kind."""

    name: str
    # Frozen dataclass of the kind's config section (the YAML key named after the kind).
    config_class: type[Any]
    # Builds the executor from its config section; may do I/O (recover state, connect).
    create: Callable[[Any], Awaitable[Executor]]


class UnknownKind(ValueError):
    """`--kind` names no registered kind; the message lists the valid ones."""


def valid_kinds() -> list[str]:
    return sorted(KINDS)


def get_kind(name: str) -> ExecutorKind:
    """The registered kind `name`, or UnknownKind listing the valid kinds."""
    target = KINDS.get(name)
    if target is None:
        raise UnknownKind(f"unknown executor kind {name!r}; valid kinds: {', '.join(valid_kinds())}")
    module_name, _, attr = target.partition(":")
    kind = getattr(importlib.import_module(module_name), attr)
    if not isinstance(kind, ExecutorKind) or kind.name != name:
        raise TypeError(f"{target} is not the ExecutorKind for {name!r}")
    return kind
