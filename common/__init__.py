"""Shared building blocks of StarForge's services: errors, gRPC servers and channels, configuration.

Every service (control plane, executor services, forgelet) and the CLI use these, so the way an
error becomes a gRPC status, or a config file becomes a dataclass, is written once.
"""

from common.source import version as _version

# pyproject.toml's `version` (the installed package metadata): the one place it is written.
__version__ = _version()
