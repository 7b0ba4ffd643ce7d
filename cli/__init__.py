"""`sf`, the StarForge command line: labs, experiments, packing, submission and job control.

The CLI holds only a personal access token (never cluster credentials) and talks to one console
(the control plane) over gRPC. Command modules live in `cli.commands`; the pieces they share
(config, client, lab, packing, spec building, output, errors) are small modules of their own so
that integration tests can call them without going through the command line.

Start-up time is part of the interface (`sf job ls` runs in scripts and loops): modules import
what every command needs at the top and the rest where it is used, `cli.app` loads a command's
module only when that command runs, and `cli.main` runs the hot read commands (`sf job ls`, `sf job
status`, `sf job logs`, `sf --version`) through `cli.fastpath`, without typer (bench `cli`,
docs/benchmarks.md).
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "__version__":  # read on first use (common.__version__): only `sf --version` needs it
        import common

        version: str = common.__version__
        globals()["__version__"] = version
        return version
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
