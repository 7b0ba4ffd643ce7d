"""The adapter interface: what an adapter gets and what it returns."""

from __future__ import annotations

import pathlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from ..capsule_file import RunSpec


@dataclass(frozen=True)
class AdapterContext:
    """Everything an adapter may look at to build the command.

    ``environ`` is the runner's environment (FORGE_OUT_DIR, FORGE_RESUME, PATH, dataset mounts such
    as TRAIN_DATA_DIR): adapters read it instead of ``os.environ`` so that tests pass their own.
    """

    run: RunSpec
    capsule_dir: pathlib.Path
    workspace_dir: pathlib.Path
    scratch_dir: pathlib.Path
    config_path: pathlib.Path
    environ: Mapping[str, str] = field(default_factory=dict)


class MetricPoint(NamedTuple):
    """One scalar a framework printed: the runner reports it like an SDK ``starforge.report``."""

    step: int
    name: str
    value: float


class MetricParser(Protocol):
    """Turns the training command's output lines into metric points.

    Frameworks print their metrics (HF Trainer's dict lines, verl's console logger, NeMo-RL's step
    summaries); a parser reads them so that a method reports through the platform without any
    change to the framework. Stateful (step counters, sections); fed every line of stdout and
    stderr in order.
    """

    def feed(self, line: str) -> list[MetricPoint]: ...


@dataclass(frozen=True)
class CommandSpec:
    """The command to run. ``name`` is how platform messages call it ("train.sh").

    ``env`` is added to the training environment; ``metrics`` parses the command's output lines
    (None: the command reports through the SDK only).
    """

    argv: list[str]
    cwd: pathlib.Path
    name: str
    display: str
    env: dict[str, str] = field(default_factory=dict)
    metrics: MetricParser | None = None


class Adapter(Protocol):
    name: str

    def command(self, ctx: AdapterContext) -> CommandSpec:
        """Build the command; raise errors.PrecheckError when the job cannot start as declared."""
        ...
