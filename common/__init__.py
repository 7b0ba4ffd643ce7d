"""Shared building blocks of StarForge's services: errors, gRPC servers and channels, configuration.

Every service (control plane, executor services, forgelet) and the CLI use these, so the way an
error becomes a gRPC status, or a config file becomes a dataclass, is written once.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """`__version__`: pyproject.toml's `version` (the installed package metadata), the one place it is
    written. Read on first use: importlib.metadata costs ~20 ms, and `sf job ls` never needs it."""
    if name == "__version__":
        from common.source import version

        globals()["__version__"] = value = version()
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
