"""The runner's settings, from the environment the executor sets (docs/ARCHITECTURE.md)."""

from __future__ import annotations

import math
import pathlib
from collections.abc import Mapping
from dataclasses import dataclass

from .address import parse_address, tls_context
from .errors import RunnerConfigError

DEFAULT_DRAIN_SECONDS = 120.0
DEFAULT_STOP_GRACE_SECONDS = 10.0


@dataclass(frozen=True)
class RunnerSettings:
    capsule_dir: pathlib.Path
    workspace_dir: pathlib.Path
    scratch_dir: pathlib.Path
    ingest_addr: str
    # PEM CA bundle verifying the control plane's TLS certificate; empty: plaintext ingest.
    ingest_ca_pem: str
    # FORGE_INGEST_TOKEN_FILE; `ingest_token` is what main read from it (see secrecy.py).
    ingest_token_file: pathlib.Path
    drain_seconds: float
    stop_grace_seconds: float
    ingest_token: str = ""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> RunnerSettings:
        missing = [
            name
            for name in (
                "FORGE_CAPSULE_DIR",
                "FORGE_WORKSPACE_DIR",
                "FORGE_SCRATCH_DIR",
                "FORGE_INGEST_ADDR",
                "FORGE_INGEST_TOKEN_FILE",
            )
            if not environ.get(name)
        ]
        if missing:
            raise RunnerConfigError(f"{', '.join(missing)} not set; the executor must set them")
        try:
            parse_address(environ["FORGE_INGEST_ADDR"])
            tls_context(environ.get("FORGE_INGEST_CA_PEM", ""))
        except ValueError as exc:
            raise RunnerConfigError(str(exc)) from None
        return cls(
            capsule_dir=pathlib.Path(environ["FORGE_CAPSULE_DIR"]),
            workspace_dir=pathlib.Path(environ["FORGE_WORKSPACE_DIR"]),
            scratch_dir=pathlib.Path(environ["FORGE_SCRATCH_DIR"]),
            ingest_addr=environ["FORGE_INGEST_ADDR"],
            ingest_ca_pem=environ.get("FORGE_INGEST_CA_PEM", ""),
            ingest_token_file=pathlib.Path(environ["FORGE_INGEST_TOKEN_FILE"]),
            drain_seconds=_seconds(environ, "FORGE_INGEST_DRAIN_SECONDS", DEFAULT_DRAIN_SECONDS),
            stop_grace_seconds=_seconds(environ, "FORGE_STOP_GRACE_SECONDS", DEFAULT_STOP_GRACE_SECONDS),
        )


def _seconds(environ: Mapping[str, str], name: str, default: float) -> float:
    raw = environ.get(name, "")
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise RunnerConfigError(f"{name} must be a number of seconds, got {raw!r}") from None
    if not math.isfinite(value) or value < 0:
        raise RunnerConfigError(f"{name} must be a non-negative number of seconds, got {raw!r}")
    return value
