"""Configuration of the `agent` executor (the `agent:` section of the executor's config file).

    agent:
      fleet: gpu                          # nodes that registered with this fleet name
      control_address: 10.0.0.1:7070      # the control plane's NodeRegistryService (ListNodes)
      control_token_file: /etc/starforge/agent-token   # sf admin executor-token --fleet gpu (or an admin PAT)
      forgelet_token_file: /etc/starforge/forgelet-token    # what every forgelet requires
      runtime: docker                     # docker (GPU fleets) or process (CPU-only fleets)
      tls:                                # TLS to the registry and forgelets (mutual with a client cert)
        ca_file: /etc/starforge/tls/ca.crt
        client_cert_file: /etc/starforge/tls/agent.crt
        client_key_file: /etc/starforge/tls/agent.key
      state_dir: /var/lib/starforge/executor-agent

Tokens may be given inline (`control_token`, `forgelet_token`) or as files, which are read on
each use so a rotated file takes effect without a restart (and so a token written after the
executor started, like the embedded console's admin token, is picked up).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from common.config import ConfigError
from common.tls import TlsConfig, check_dial
from executor_svc.base import RUNTIME_DOCKER, RUNTIME_PROCESS

RUNTIMES = (RUNTIME_DOCKER, RUNTIME_PROCESS)


@dataclasses.dataclass(frozen=True)
class AgentConfig:
    """The `agent:` section."""

    # Fleet name the forgelets registered with. Required.
    fleet: str = ""
    # Control plane gRPC address (NodeRegistryService). Required.
    control_address: str = ""
    control_token: str = ""
    control_token_file: str = ""
    # Bearer token forgelets require on ForgeletService (their `executor_token`).
    forgelet_token: str = ""
    forgelet_token_file: str = ""
    # What the fleet's forgelets run attempts in; decides the IMAGES capability.
    runtime: str = RUNTIME_DOCKER
    # The attempt -> node map lives here, so a restarted agent executor still routes its calls.
    state_dir: Path = Path(".state/executor-agent")
    # Deadline of one call to the registry or a forgelet.
    call_timeout_seconds: float = 10.0
    # Deadline of StartAttempt: the node downloads the capsule and workspace first.
    launch_timeout_seconds: float = 300.0
    # Nodes silent for longer get no new attempts (the registry marks them LOST later).
    stale_node_seconds: float = 8.0
    # A placement holds its GPUs until the node's heartbeat is this much newer than the placement.
    reservation_grace_seconds: float = 5.0
    # The node list is read again after this long (placement always reads it fresh).
    nodes_refresh_seconds: float = 2.0
    # An attempt the ledger ended that still runs (its runner may still drain its journal) is
    # stopped by Cleanup after this long; at once when its node was lost meanwhile.
    stray_grace_seconds: float = 300.0
    # TLS of the channels to the registry and the forgelets: tls.ca_file verifies them,
    # tls.client_cert_file/client_key_file answer forgelets that require mutual TLS.
    tls: TlsConfig = dataclasses.field(default_factory=TlsConfig)

    def __post_init__(self) -> None:
        if not self.fleet:
            raise ConfigError("agent.fleet: required (the fleet name the forgelets registered with)")
        if not self.control_address:
            raise ConfigError("agent.control_address: required (the control plane's gRPC address)")
        if self.runtime not in RUNTIMES:
            raise ConfigError(f"agent.runtime: {self.runtime!r} is not one of {', '.join(RUNTIMES)}")
        if self.control_token and self.control_token_file:
            raise ConfigError("agent.control_token and agent.control_token_file: set one, not both")
        if self.forgelet_token and self.forgelet_token_file:
            raise ConfigError("agent.forgelet_token and agent.forgelet_token_file: set one, not both")
        if self.stale_node_seconds <= 0 or self.call_timeout_seconds <= 0:
            raise ConfigError("agent: timeouts must be positive")
        if self.tls.serving:
            raise ConfigError("agent.tls: only the dialing keys apply here; the served port's TLS is under tls:")
        check_dial(self.control_address, self.tls, "agent.control_address")

    def registry_token(self) -> str:
        return read_secret(self.control_token, self.control_token_file, "agent.control_token_file")

    def node_token(self) -> str:
        return read_secret(self.forgelet_token, self.forgelet_token_file, "agent.forgelet_token_file")


def read_secret(value: str, path: str, key: str) -> str:
    """A token given inline or in a file (read on every use)."""
    if value or not path:
        return value
    try:
        return Path(path).expanduser().read_text().strip()
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {path}: {exc.strerror}") from None
