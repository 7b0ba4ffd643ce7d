"""The adapter interface: what an adapter gets and what it returns."""

from __future__ import annotations

import pathlib
from dataclasses import dataclass, field
from typing import Protocol

from ..capsule_file import RunSpec


@dataclass(frozen=True)
class AdapterContext:
    """Everything an adapter may look at to build the command."""

    run: RunSpec
    capsule_dir: pathlib.Path
    workspace_dir: pathlib.Path
    scratch_dir: pathlib.Path
    config_path: pathlib.Path


@dataclass(frozen=True)
class CommandSpec:
    """The command to run. ``name`` is how platform messages call it ("train.sh")."""

    argv: list[str]
    cwd: pathlib.Path
    name: str
    display: str
    env: dict[str, str] = field(default_factory=dict)


class Adapter(Protocol):
    name: str

    def command(self, ctx: AdapterContext) -> CommandSpec:
        """Build the command; raise errors.PrecheckError when the job cannot start as declared."""
        ...
