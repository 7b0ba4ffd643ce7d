"""Entry point of `sf` (the console script `cli.main:main`).

The hot read commands (`sf job ls`, `sf job status`, `sf job logs`, `sf --version`) run through
`cli.fastpath`, which never imports typer or pydantic; every other command line, and any it does
not parse exactly as the full tree would, runs through the typer command tree of `cli.app`.
`app`, `COMMANDS`, `SfGroup` and `load_commands` are re-exported from `cli.app` on first use, so
importing this module costs nothing until one of them is asked for.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from cli.app import COMMANDS, SfGroup, app, load_commands

__all__ = ["COMMANDS", "SfGroup", "app", "exit_now", "load_commands", "main"]


def __getattr__(name: str) -> Any:
    if name in ("app", "COMMANDS", "SfGroup", "load_commands"):
        from cli import app as tree

        return getattr(tree, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """Console-script entry point (`sf`): the fast path when it applies, else the full tree."""
    from common.gc_tuning import tune_for_command

    tune_for_command()  # before the imports, whose allocations are most of what a command makes
    from cli import fastpath

    code = fastpath.run(sys.argv[1:])
    if code is None:
        from cli.app import app

        app()  # exits with the command's code (cli.app.SfGroup.main)
    exit_now(code)


def exit_now(code: int | None) -> NoReturn:
    """End the process with `code` once what an exit owes is done, without the interpreter's
    teardown: freeing the modules a command loaded (grpc, protobuf, ~400 of them) is ~40 ms of
    `sf submit`'s wall and nothing depends on it. What is owed: the atexit handlers (cli.gitinfo's
    git processes nobody took, logging's flush), then stdout and stderr flushed. A non-daemon
    thread still running, or a flush that fails (a closed pipe), takes the ordinary `sys.exit`,
    which handles those as it always did."""
    import atexit
    import os
    import threading

    main_thread = threading.main_thread()
    if any(t is not main_thread and not t.daemon and t.is_alive() for t in threading.enumerate()):
        sys.exit(code)
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        sys.exit(code)
    os._exit(code or 0)


if __name__ == "__main__":
    main()
