"""Configuration of the `local` executor (the `local:` section of the executor's config file).

The runtime is chosen here and nowhere else: `process` (the capsule as a child process; the
embedded default) or `docker` (a container on a Docker engine). A misconfigured runtime is an
error, never the other runtime.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from common.config import ConfigError
from executor_svc.base import RUNTIME_DOCKER, RUNTIME_PROCESS

RUNTIMES = (RUNTIME_PROCESS, RUNTIME_DOCKER)


@dataclasses.dataclass(frozen=True)
class SeriesConfig:
    """GPUs of one series on this node.

    `gpus` is either a list of device indices (`[0, 1, 2, 3]`) or a count (`8` = indices 0..7).
    `slots` caps how many attempts of this series run at once (0: no cap beyond the GPUs); a CPU
    series has no GPUs and is bounded by `slots` alone. `real_gpus: false` marks configured GPUs
    that are not physical devices (tests on CPU machines): they are allocated and recorded, but
    no device request is sent to Docker.
    """

    series: str
    gpus: list[int] | int = 0
    slots: int = 0
    real_gpus: bool = True

    def indices(self) -> list[int]:
        return list(range(self.gpus)) if isinstance(self.gpus, int) else list(self.gpus)


@dataclasses.dataclass(frozen=True)
class MountConfig:
    """An extra bind mount for every container (a model cache, a shared data disk)."""

    source: str
    target: str
    read_only: bool = True


@dataclasses.dataclass(frozen=True)
class DockerConfig:
    """How the docker runtime reaches its engine and runs containers."""

    # Engine address ("unix:///var/run/docker.sock"); empty: DOCKER_HOST or the default socket.
    base_url: str = ""
    # Images are never pulled (no registry is assumed reachable): a missing image fails Launch.
    pull: str = "never"
    # "host" so containers reach the control plane on loopback; "none" for no network at all.
    network_mode: str = "host"
    # Seconds for one engine API call.
    api_timeout_seconds: float = 60.0
    extra_mounts: list[MountConfig] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class LocalConfig:
    """The `local:` section."""

    # Attempts, the blob cache and FORGE_OUT_DIR of every job live here.
    state_dir: Path = Path(".state/executor-local")
    runtime: str = RUNTIME_PROCESS
    # Node name reported in LaunchResponse and observations; empty: the host name.
    node_name: str = ""
    inventory: list[SeriesConfig] = dataclasses.field(
        default_factory=lambda: [SeriesConfig(series="cpu", gpus=0, slots=4)]
    )
    # Seconds between SIGTERM and SIGKILL when neither the request nor Stop gives one.
    default_stop_grace_seconds: float = 10.0
    # Blobs fetched at once per launch.
    fetch_concurrency: int = 8
    docker: DockerConfig = dataclasses.field(default_factory=DockerConfig)
    # Process runtime: [first, last] uids (inclusive) to run attempts as, one uid per attempt, e.g.
    # [200000, 265535]. The executor must run as root; the uids must belong to no one else on the
    # host. Empty: every attempt runs as the executor's own user, unisolated (one trusted user).
    job_uid_range: list[int] = dataclasses.field(default_factory=list)
    # Process runtime with job_uid_range: start each attempt's runner by forking a warm process
    # per runner venv (a pre-forked runner) instead of through `sh bootstrap.sh`; the same checks
    # and uid, a fraction of the CPU. false: every attempt through bootstrap.sh.
    preforked_runner: bool = True
    # Process runtime with job_uid_range: a capsule directory (as capsule.build writes it: its
    # manifest.json names the runner) whose runner venv is installed and whose pre-forked runner
    # is started when the executor starts, not by the first attempts, which would each wait
    # seconds for it. The embedded console names its own capsule. Empty: on first use.
    warm_capsule: str = ""

    def __post_init__(self) -> None:
        if self.runtime not in RUNTIMES:
            raise ConfigError(f"local.runtime: {self.runtime!r} is not one of {', '.join(RUNTIMES)}")
        _check_uid_range(self.job_uid_range)
        _check_warm_capsule(self)
        if self.docker.pull != "never":
            raise ConfigError(f"local.docker.pull: only 'never' is supported, got {self.docker.pull!r}")
        if self.docker.network_mode not in ("host", "none"):
            raise ConfigError(
                f"local.docker.network_mode: {self.docker.network_mode!r}; use 'host' or 'none' "
                "(the executor never creates bridges or NAT rules)"
            )
        if not self.inventory:
            raise ConfigError("local.inventory: list at least one series")
        seen: set[str] = set()
        used: set[int] = set()
        for s in self.inventory:
            if s.series in seen:
                raise ConfigError(f"local.inventory: series {s.series!r} is listed twice")
            seen.add(s.series)
            idx = s.indices()
            if len(set(idx)) != len(idx) or any(i < 0 for i in idx):
                raise ConfigError(f"local.inventory[{s.series}].gpus: indices must be distinct and >= 0")
            if used & set(idx):
                raise ConfigError(
                    f"local.inventory[{s.series}].gpus: indices {sorted(used & set(idx))} are "
                    "also listed under another series"
                )
            used |= set(idx)
            if s.slots < 0:
                raise ConfigError(f"local.inventory[{s.series}].slots must be >= 0")


def _check_uid_range(value: list[int]) -> None:
    if not value:
        return
    if len(value) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ConfigError(f"local.job_uid_range: {value!r} is not [first, last], two uids")
    first, last = value
    if first < 1000 or last < first or last > 2**31 - 2:
        raise ConfigError(
            f"local.job_uid_range: [{first}, {last}] must be ascending uids from 1000 up (no system "
            "users, never root), e.g. [200000, 265535]"
        )


def _check_warm_capsule(cfg: LocalConfig) -> None:
    """warm_capsule only where there is a shared runner venv to warm: never accepted and ignored."""
    if not cfg.warm_capsule:
        return
    if not isinstance(cfg.warm_capsule, str) or not Path(cfg.warm_capsule).is_absolute():
        raise ConfigError(f"local.warm_capsule: {cfg.warm_capsule!r} is not an absolute path to a capsule directory")
    if cfg.runtime != RUNTIME_PROCESS or not cfg.job_uid_range:
        raise ConfigError(
            "local.warm_capsule: only the process runtime with job_uid_range has a shared runner venv "
            f"to warm (runtime {cfg.runtime!r}, job_uid_range {cfg.job_uid_range or 'unset'}); remove it"
        )
    if not Path(cfg.warm_capsule, "manifest.json").is_file():
        raise ConfigError(f"local.warm_capsule: {cfg.warm_capsule} holds no manifest.json (not a capsule directory)")
