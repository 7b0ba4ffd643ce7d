"""What a local runtime (process, docker) does; the executor keeps records, GPUs and states.

A runtime only starts, inspects, stops and removes the one backend object of an attempt (a
process group, a container). Mapping what it sees onto the ledger's states is done once, in
`executor_svc.local.executor`, so both runtimes report the same states for the same facts.
"""

from __future__ import annotations

import abc
import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from starforge_api.executor.v1 import launch_request_pb2 as lr_pb

from executor_svc.local.config import SeriesConfig
from executor_svc.local.records import AttemptDirs, AttemptRecord

LOG_TAIL_LINES = 50


@dataclass(frozen=True)
class RuntimeState:
    """The backend object of an attempt as the runtime sees it."""

    # False when the process (group) or container is gone without leaving an exit code.
    exists: bool
    running: bool = False
    # Accepted but not running yet (a created, not started, container).
    pending: bool = False
    exit_code: int | None = None
    oom_killed: bool = False
    started_at: dt.datetime | None = None
    ended_at: dt.datetime | None = None
    # The backend's own words ("running", "exited (3)").
    raw: str = ""

    @property
    def active(self) -> bool:
        return self.running or self.pending


@dataclass(frozen=True)
class Discovered:
    """An attempt found on the backend by its labels (after an executor restart)."""

    attempt_id: str
    series: str
    gpus: tuple[int, ...]
    record: AttemptRecord


@dataclass(frozen=True)
class StartSpec:
    """Everything a runtime needs to start an attempt."""

    request: lr_pb.LaunchRequest
    dirs: AttemptDirs
    out_dir: Path
    series: SeriesConfig
    gpus: Sequence[int]
    stop_grace_seconds: float


class Runtime(abc.ABC):
    """One way of running `sh bootstrap.sh` on this node."""

    name: str = ""
    # ExecutorCapability values this runtime adds (IMAGES for docker).
    capabilities: frozenset[int] = frozenset()

    @property
    def shares_cache(self) -> bool:
        """True when jobs can never write capsule and dataset files (read-only mounts, another
        uid), so they may be hard links into the node's blob cache; else private copies."""
        return False

    async def prepare_host(self) -> None:  # noqa: B027 - nothing to prepare by default
        """Check and secure the host before the first launch (ConfigError when it cannot run)."""

    async def warm(self) -> None:  # noqa: B027 - nothing to warm by default
        """Prepare, once the executor serves, what the first attempts would otherwise wait for
        (the process runtime's shared runner venv and its pre-forked runner). Never raises: a
        warm-up that fails leaves the attempts to do it, as without one."""

    async def check_image(self, request: lr_pb.LaunchRequest) -> str:
        """The image's digest, or FailedPrecondition when it cannot run here. Before any download."""
        return ""

    async def ping(self) -> None:  # noqa: B027 - nothing to reach for the process runtime
        """Raise Unavailable when the backend cannot be reached."""

    async def find(self, attempt_id: str) -> AttemptRecord | None:
        """A record rebuilt from the backend object of an attempt that has no record on disk."""
        return None

    async def discover(self) -> list[Discovered]:
        """Attempts of this executor the backend knows by their labels."""
        return []

    @abc.abstractmethod
    async def start(self, spec: StartSpec, record: AttemptRecord) -> None:
        """Start the attempt; fill `record.handle` (and pid, image digest) before returning."""

    @abc.abstractmethod
    async def inspect(self, record: AttemptRecord) -> RuntimeState:
        """What the backend says about the attempt now."""

    @abc.abstractmethod
    async def log_tail(self, record: AttemptRecord, lines: int = LOG_TAIL_LINES) -> list[str]:
        """Last lines bootstrap.sh printed (outside the ingest stream)."""

    @abc.abstractmethod
    async def stop(self, record: AttemptRecord, grace_seconds: float) -> None:
        """SIGTERM, wait up to `grace_seconds`, SIGKILL; returns once it is gone."""

    @abc.abstractmethod
    async def remove(self, record: AttemptRecord) -> int:
        """Remove the backend object (keeping its logs in bootstrap.log); number removed."""

    async def close(self) -> None:  # noqa: B027 - optional
        """Release clients. Never stops attempts."""


def read_log_tail(path: Path, lines: int = LOG_TAIL_LINES, max_bytes: int = 64 * 1024) -> list[str]:
    """Last `lines` lines of a log file (reading at most its last `max_bytes`)."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, 2)
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except FileNotFoundError:
        return []
    text = data.decode("utf-8", errors="replace").splitlines()
    if size > max_bytes and text:
        text = text[1:]  # the first line was cut
    return text[-lines:]
