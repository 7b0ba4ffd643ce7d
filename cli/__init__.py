"""`sf`, the StarForge command line: labs, experiments, packing, submission and job control.

The CLI holds only a personal access token (never cluster credentials) and talks to one console
(the control plane) over gRPC. Command modules live in `cli.commands`; the pieces they share
(config, client, lab, packing, spec building, output, errors) are small modules of their own so
that integration tests can call them without going through the command line.
"""

from __future__ import annotations

from importlib import metadata


def _version() -> str:
    try:
        return metadata.version("starforge")
    except metadata.PackageNotFoundError:  # running from a source tree that was never installed
        return "0.0.0+unknown"


__version__ = _version()
