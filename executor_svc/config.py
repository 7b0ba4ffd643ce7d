"""Configuration of one `starforge-executor` process.

One YAML file per process: the service keys at the top level and the kind's own section under
the kind's name, e.g.

    listen: 127.0.0.1:7071
    token: change-me
    tls: {cert_file: /etc/starforge/tls/executor.crt, key_file: /etc/starforge/tls/executor.key}
    local:
      runtime: process
      state_dir: /var/lib/starforge/executor-local

Loaded with `common.config.load_config` (defaults -> file -> environment, unknown keys refused)
with the environment prefix `STARFORGE_EXECUTOR_`: `STARFORGE_EXECUTOR_TOKEN` overrides `token`,
`STARFORGE_EXECUTOR_LOCAL__RUNTIME=docker` overrides `local.runtime`. The prefix is the
component's own so that the control plane's `STARFORGE_*` variables never leak into an executor
started from it.

The dataclass is made per kind (`service_config_class`) so that each kind owns its section's
dataclass and adding a kind never edits this file.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import pathlib
from collections.abc import Mapping
from typing import Any

from common.config import ConfigError, load_config
from common.tls import TlsConfig

ENV_PREFIX = "STARFORGE_EXECUTOR_"
LOG_LEVELS = ("debug", "info", "warning", "error")


@dataclasses.dataclass(frozen=True)
class ServiceConfig:
    """Keys every executor process has, whatever its kind."""

    # Address to serve on; `--listen` overrides it. Port 0 picks a free port.
    listen: str = "127.0.0.1:7071"
    # Bearer token every call must carry (the control plane's `fleets[].token`). Required unless
    # `insecure: true`.
    token: str = ""
    # Serve without a token; allowed only on a loopback listen address (a single-machine setup).
    insecure: bool = False
    # Logging level: debug, info, warning, error.
    log_level: str = "info"
    # Seconds in-flight calls get to finish after SIGTERM.
    shutdown_grace_seconds: float = 5.0
    # TLS (and mutual TLS with tls.client_ca_file) of the served port (docs/security.md).
    tls: TlsConfig = dataclasses.field(default_factory=TlsConfig)

    def __post_init__(self) -> None:
        if self.log_level.lower() not in LOG_LEVELS:
            raise ConfigError(f"log_level: {self.log_level!r} is not one of {', '.join(LOG_LEVELS)}")
        if self.tls.ca_file or self.tls.client_cert_file:
            # the control plane's CA arrives in each LaunchRequest; the agent kind dials with agent.tls
            raise ConfigError(
                "tls.ca_file, tls.client_cert_file: an executor's tls: section is for its served port only; "
                "the agent kind's channels take theirs under agent.tls"
            )
        if self.token and self.insecure:
            raise ConfigError("token and insecure: set a token, or insecure: true (loopback only), not both")


def service_config_class(kind: str, kind_config: type[Any]) -> type[Any]:
    """A frozen dataclass with ServiceConfig's fields plus `<kind>: <kind_config>`."""
    return dataclasses.make_dataclass(
        f"{kind.capitalize()}ExecutorServiceConfig",
        [(kind, kind_config, dataclasses.field(default_factory=kind_config))],
        bases=(ServiceConfig,),
        frozen=True,
    )


def load_service_config(
    kind: str, kind_config: type[Any], path: pathlib.Path | str | None, env: Mapping[str, str]
) -> Any:
    """Load the configuration of an executor process of `kind` (see the module docstring)."""
    return load_config(service_config_class(kind, kind_config), path, env, prefix=ENV_PREFIX)


def is_loopback(listen: str) -> bool:
    """True when `listen` (host:port) binds a loopback address only."""
    host = listen.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_listen_security(cfg: ServiceConfig, listen: str) -> None:
    """Whoever can call an executor service can run containers: refuse to serve without a token,
    except `insecure: true` on a loopback address."""
    if cfg.token:
        return
    if not cfg.insecure:
        raise ConfigError(
            "token: required (every ExecutorService call must carry it; set the same value as the "
            "control plane's fleets[].token, or STARFORGE_EXECUTOR_TOKEN). For a single-machine "
            "setup on a loopback address only, set insecure: true instead"
        )
    if not is_loopback(listen):
        raise ConfigError(
            f"insecure: true is allowed only on a loopback listen address (127.0.0.1, ::1), not {listen!r}; "
            "set a token instead"
        )
