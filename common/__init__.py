"""Shared building blocks of StarForge's services: errors, gRPC servers and channels, configuration.

Every service (control plane, executor services, forgelet) and the CLI use these, so the way an
error becomes a gRPC status, or a config file becomes a dataclass, is written once.
"""

__version__ = "0.1.0"
