"""`sf`, the StarForge command line: labs, experiments, packing, submission and job control.

The CLI holds only a personal access token (never cluster credentials) and talks to one console
(the control plane) over gRPC. Command modules live in `cli.commands`; the pieces they share
(config, client, lab, packing, spec building, output, errors) are small modules of their own so
that integration tests can call them without going through the command line.
"""

from __future__ import annotations

from common import __version__

__all__ = ["__version__"]
