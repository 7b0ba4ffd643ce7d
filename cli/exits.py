"""How a failure leaves `sf`: one message on stderr (text or JSON) and the exit code.

Shared by the full command tree (`cli.app.SfGroup.main`) and the fast path of the hot read
commands (`cli.fastpath`), so both print a failure the same way. Imports neither typer nor grpc.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from cli.errors import EXIT_FAILURE, EXIT_INTERRUPTED, CliError
from cli.output import print_error


def wants_json(args: Sequence[str]) -> bool:
    """Whether `-o json` appears anywhere in argv (errors before parsing must honour it too)."""
    items = list(args)
    for i, a in enumerate(items):
        if a == "--":
            return False
        if a in ("-o", "--output") and i + 1 < len(items) and items[i + 1] == "json":
            return True
        if a in ("--output=json", "-ojson"):
            return True
    return False


def report_failure(exc: BaseException, *, as_json: bool) -> int:
    """Print what `exc` means to the user and return the exit code `sf` ends with.

    A `CliError` prints its message (its own code); Ctrl-C exits 130 silently; a closed stdout
    (`sf job ls | head`) exits 1 silently; anything else is a bug in sf: one line, never a
    traceback unless SF_DEBUG is set. Any other BaseException (SystemExit) is re-raised.
    """
    if isinstance(exc, CliError):
        print_error(exc, as_json=as_json)
        return exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(exc, BrokenPipeError):
        return EXIT_FAILURE
    if not isinstance(exc, Exception):
        raise exc
    if os.environ.get("SF_DEBUG"):
        import traceback

        traceback.print_exception(exc)
    print_error(
        CliError(
            f"sf failed unexpectedly: {type(exc).__name__}: {exc}",
            EXIT_FAILURE,
            hint="run again with SF_DEBUG=1 for details, and report it",
            code="INTERNAL",
        ),
        as_json=as_json,
    )
    return EXIT_FAILURE
