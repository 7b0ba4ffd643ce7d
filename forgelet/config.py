"""forgelet's configuration: one YAML file, defaults -> file -> `STARFORGE_FORGELET_*` environment.

    name: gpu-07                       # default: the host name
    fleet: gpu                         # the agent fleet this node belongs to
    listen: 0.0.0.0:7072
    advertise: 10.0.0.7:7072           # what the agent executor dials; default: the bound address
    control_address: 10.0.0.1:7070
    join_token_file: /etc/starforge/join-token  # `sf admin node join-token NODE --fleet F`, used once
    executor_token_file: /etc/starforge/forgelet-token  # what the agent executor must present
    tls:                               # ForgeletService over mutual TLS; TLS to the control plane
      cert_file: /etc/starforge/tls/node.crt
      key_file: /etc/starforge/tls/node.key
      client_ca_file: /etc/starforge/tls/ca.crt     # require the agent executor's client certificate
      ca_file: /etc/starforge/tls/ca.crt            # verifies control_address
    discovery: auto                    # auto | nvml | nvidia-smi | config
    inventory:                         # used when discovery finds no GPUs (or discovery: config)
      - {series: h200, gpus: 8}
    cpu_slots: 4
    local:                             # how attempts run (the local executor's settings)
      runtime: docker
      state_dir: /var/lib/starforge/forgelet
      docker: {base_url: unix:///var/run/docker.sock}

The GPU and container settings reuse the local executor's dataclasses (`SeriesConfig`,
`DockerConfig`): a forgelet is a local executor on a GPU node plus registration and heartbeats.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Mapping
from pathlib import Path

from common.config import ConfigError, load_config
from common.tls import TlsConfig, check_dial
from executor_svc.local.config import RUNTIMES, DockerConfig, LocalConfig, SeriesConfig

ENV_PREFIX = "STARFORGE_FORGELET_"
DISCOVERY = ("auto", "nvml", "nvidia-smi", "config")
LOG_LEVELS = ("debug", "info", "warning", "error")


@dataclasses.dataclass(frozen=True)
class NodeLocalConfig:
    """The `local:` section: how this node runs attempts (the local executor, minus inventory)."""

    # docker on GPU nodes; process for CPU-only nodes (image "host" jobs).
    runtime: str = "docker"
    # Attempt records, blob cache and FORGE_OUT_DIR of every job; keep it across restarts.
    state_dir: Path = Path(".state/forgelet")
    default_stop_grace_seconds: float = 10.0
    fetch_concurrency: int = 8
    docker: DockerConfig = dataclasses.field(default_factory=DockerConfig)
    # Process runtime: run each attempt as its own uid from this range (see the local executor).
    job_uid_range: list[int] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        if self.runtime not in RUNTIMES:
            raise ConfigError(f"local.runtime: {self.runtime!r} is not one of {', '.join(RUNTIMES)}")


@dataclasses.dataclass(frozen=True)
class ForgeletConfig:
    """Everything `forgelet serve` and `forgelet drain` need (see the module docstring)."""

    # The fleet (an `agent` fleet of the control plane) this node belongs to. Required.
    fleet: str = ""
    # Node name, unique in the registry; empty: the host name.
    name: str = ""
    listen: str = "127.0.0.1:7072"
    # Address the agent executor dials; empty: the bound listen address (not 0.0.0.0).
    advertise: str = ""
    control_address: str = "127.0.0.1:7070"
    # Join token (sfj_..., single use, bound to this node's name and fleet) or a file holding it:
    # the first registration exchanges it for a node credential stored in <state_dir>/node-token.
    join_token: str = ""
    join_token_file: str = ""
    # An already-issued node credential (sfn_...) or a file holding it; wins over the stored one.
    token: str = ""
    token_file: str = ""
    # Bearer token the agent executor must present on ForgeletService calls (or a file holding it).
    # Required: whoever can call forgelet can run containers on the node.
    executor_token: str = ""
    executor_token_file: str = ""
    discovery: str = "auto"
    # Configured GPUs, used when discovery finds none or `discovery: config`.
    inventory: list[SeriesConfig] = dataclasses.field(default_factory=list)
    # Attempts of series "cpu" (no GPUs) that may run at once; 0: none.
    cpu_slots: int = 4
    local: NodeLocalConfig = dataclasses.field(default_factory=NodeLocalConfig)
    # Deadline of each call to the control plane.
    call_timeout_seconds: float = 5.0
    # Longest wait between two registration/heartbeat tries while the control plane is away.
    max_backoff_seconds: float = 5.0
    shutdown_grace_seconds: float = 5.0
    log_level: str = "info"
    # TLS of ForgeletService (mutual with tls.client_ca_file: the agent executor's certificate)
    # and of the channel to the control plane (tls.ca_file); docs/security.md.
    tls: TlsConfig = dataclasses.field(default_factory=TlsConfig)

    def __post_init__(self) -> None:
        if not self.fleet:
            raise ConfigError("fleet: required (the name of the agent fleet this node joins)")
        if self.discovery not in DISCOVERY:
            raise ConfigError(f"discovery: {self.discovery!r} is not one of {', '.join(DISCOVERY)}")
        if self.log_level.lower() not in LOG_LEVELS:
            raise ConfigError(f"log_level: {self.log_level!r} is not one of {', '.join(LOG_LEVELS)}")
        if self.token and self.token_file:
            raise ConfigError("token and token_file: set one, not both")
        if self.join_token and self.join_token_file:
            raise ConfigError("join_token and join_token_file: set one, not both")
        if self.executor_token and self.executor_token_file:
            raise ConfigError("executor_token and executor_token_file: set one, not both")
        if not (self.executor_token or self.executor_token_file):
            raise ConfigError(
                "executor_token (or executor_token_file): required; the agent executor's `forgelet_token`"
            )
        if self.cpu_slots < 0:
            raise ConfigError("cpu_slots must be >= 0")
        if self.discovery == "config" and not self.inventory and not self.cpu_slots:
            raise ConfigError("inventory: list the node's GPUs (or set cpu_slots for a CPU-only node)")
        check_dial(self.control_address, self.tls, "control_address")

    @property
    def node_name(self) -> str:
        return self.name or socket.gethostname()

    @property
    def state_dir(self) -> Path:
        return self.local.state_dir.expanduser().resolve()

    def registry_token(self) -> str:
        """The node credential given in the config ("" when none)."""
        return read_secret(self.token, self.token_file, "token_file")

    def join(self) -> str:
        """The join token given in the config ("" when none)."""
        return read_secret(self.join_token, self.join_token_file, "join_token_file")

    def forgelet_token(self) -> str:
        return read_secret(self.executor_token, self.executor_token_file, "executor_token_file")

    def local_config(self, inventory: list[SeriesConfig]) -> LocalConfig:
        """The local executor's config for this node, with the discovered (or configured) GPUs."""
        return LocalConfig(
            state_dir=self.state_dir,
            runtime=self.local.runtime,
            node_name=self.node_name,
            inventory=inventory,
            default_stop_grace_seconds=self.local.default_stop_grace_seconds,
            fetch_concurrency=self.local.fetch_concurrency,
            docker=self.local.docker,
            job_uid_range=list(self.local.job_uid_range),
        )


def read_secret(value: str, path: str, key: str) -> str:
    """A token given inline or in a file (read each time, so a rotated file takes effect)."""
    if value or not path:
        return value
    try:
        return Path(path).expanduser().read_text().strip()
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {path}: {exc.strerror}") from None


def load(path: Path | str | None, env: Mapping[str, str]) -> ForgeletConfig:
    """forgelet's configuration (module docstring); ConfigError says what is wrong and where."""
    return load_config(ForgeletConfig, path, env, prefix=ENV_PREFIX)
