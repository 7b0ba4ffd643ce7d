"""The fast path of the hot commands: `sf job ls`, `sf job status`, `sf job logs`, `sf --version`,
and `sf submit`.

These run in scripts and loops, where start-up is most of their time (and `sf submit` of an
unchanged lab is little else: bench `packaging`, its re-submit). The full command tree
(`cli.app`) costs typer, its vendored click and, because typer coerces every parameter through a
pydantic TypeAdapter, pydantic and one adapter per option: ~0.12 s of CPU before the first byte
is sent (docs/benchmarks.md, **cli**). This module parses exactly the command lines it is sure
of, the way click would, and runs the same command bodies (`cli.commands.job_read`) with the
same failure handling (`cli.exits`).

Anything else returns None and the caller runs the full tree: help (`-h`, `--help`), unknown or
misspelt options, values it does not convert exactly as typer would (e.g. `--limit 0`, `-o JSON`),
attached short values (`-n5`), `--`, a value that looks like an option, several positionals.
So help text and every usage error come from the one typer definition. The option tables below
mirror `cli.commands.job` and `cli.app.root`; tests/unit/cli/test_fastpath.py checks that they
name the same options with the same defaults, and that whatever this module accepts parses to the
same values as the full tree.
"""

from __future__ import annotations

import enum
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from cli.errors import EXIT_FAILURE, EXIT_INTERRUPTED, CliError
from cli.exits import report_failure, wants_json
from cli.output import Format, print_error

if TYPE_CHECKING:
    from cli.context import AppState


class Kind(enum.Enum):
    """How an option takes its value (only the kinds the hot commands use)."""

    FLAG = "flag"  # bool; `off` names set it False
    TEXT = "text"  # str
    MULTI = "multi"  # list[str], repeatable
    INT = "int"  # int >= minimum
    FORMAT = "format"  # `text` or `json` (cli.output.Format)


# NamedTuples, not dataclasses: each @dataclass costs ~0.3 ms of `sf`'s start (it compiles its methods)


class Opt(NamedTuple):
    """One option: the parameter it sets, its names, how it takes its value, its default."""

    dest: str
    names: tuple[str, ...]
    kind: Kind
    default: Any = None
    off: tuple[str, ...] = ()
    minimum: int = 0


class Command(NamedTuple):
    """One hot command: its path under `sf`, options, optional positional, and what runs it."""

    path: tuple[str, ...]
    options: tuple[Opt, ...]
    run: Callable[[AppState, dict[str, Any]], int]
    argument: str | None = None  # the dest of its one positional (JOB_ID, EXPERIMENT)
    argument_default: str | None = ""  # None: the positional is required


OUTPUT = Opt("output", ("--output", "-o"), Kind.FORMAT)
ROOT_OPTIONS = (
    Opt("console_addr", ("--console",), Kind.TEXT),
    Opt("output", ("--output", "-o"), Kind.FORMAT, Format.text),
)


def _ls(st: AppState, p: dict[str, Any]) -> int:
    from cli.commands import job_read

    return job_read.job_ls(
        st,
        p["output"],
        all_users=p["all_users"],
        state=p["state"],
        project=p["project"],
        experiment=p["experiment"],
        limit=p["limit"],
        label=p["label"],
    )


def _status(st: AppState, p: dict[str, Any]) -> int:
    from cli.commands import job_read

    return job_read.job_status(st, p["output"], p["job_id"])


def _logs(st: AppState, p: dict[str, Any]) -> int:
    from cli.commands import job_read

    return job_read.job_logs(st, p["output"], p["job_id"], follow=p["follow"], lines=p["lines"])


def _submit(st: AppState, p: dict[str, Any]) -> int:
    from cli import gitinfo

    gitinfo.start_early(st.cwd)  # git reads the lab while the submit flow's modules load
    from cli.commands import submit

    return submit.run_submit(st, p)


SUBMIT_OPTIONS = (
    Opt("profile", ("--profile", "-p"), Kind.MULTI),
    Opt("overrides", ("--set", "-s"), Kind.MULTI),
    Opt("model", ("--model",), Kind.TEXT, ""),
    Opt("train_data", ("--train-data",), Kind.TEXT, ""),
    Opt("validation_data", ("--validation-data",), Kind.TEXT, ""),
    Opt("train_dataset", ("--train-dataset",), Kind.TEXT, ""),
    Opt("image", ("--image",), Kind.TEXT, ""),
    Opt("framework_version", ("--framework-version",), Kind.TEXT, ""),
    Opt("upgrade_recipe", ("--upgrade-recipe",), Kind.FLAG, False),
    Opt("observability_url", ("--observability-url",), Kind.TEXT, ""),
    Opt("observability_tool", ("--observability-tool",), Kind.TEXT, ""),
    Opt("then", ("--then",), Kind.MULTI),
    Opt("retries", ("--retries",), Kind.INT),
    Opt("priority", ("--priority",), Kind.INT, 0),
    Opt("queue", ("--queue",), Kind.TEXT, ""),
    Opt("fleet", ("--fleet",), Kind.TEXT, ""),
    Opt("label", ("--label",), Kind.MULTI),
    Opt("env", ("--env",), Kind.MULTI),
    Opt("secret", ("--secret",), Kind.MULTI),
    Opt("allow_dirty", ("--allow-dirty",), Kind.FLAG, False),
    Opt("no_validate", ("--no-validate",), Kind.FLAG, False),
    Opt("dry_run", ("--dry-run",), Kind.FLAG, False),
    Opt("follow", ("--follow", "-f"), Kind.FLAG, False),
    OUTPUT,
)

COMMANDS: dict[tuple[str, ...], Command] = {
    c.path: c
    for c in (
        Command(
            ("job", "ls"),
            (
                Opt("all_users", ("--all", "-a"), Kind.FLAG, False),
                Opt("state", ("--state",), Kind.MULTI),
                Opt("project", ("--project",), Kind.TEXT, ""),
                Opt("experiment", ("--experiment",), Kind.TEXT, ""),
                Opt("limit", ("--limit", "-n"), Kind.INT, 50, minimum=1),
                Opt("label", ("--label", "-l"), Kind.MULTI),
                OUTPUT,
            ),
            _ls,
        ),
        Command(("job", "status"), (OUTPUT,), _status, argument="job_id", argument_default="latest"),
        Command(
            ("job", "logs"),
            (
                Opt("follow", ("--follow", "-f"), Kind.FLAG, True, off=("--no-follow", "-F")),
                Opt("lines", ("--lines", "-n"), Kind.INT, None, minimum=0),
                OUTPUT,
            ),
            _logs,
            argument="job_id",
            argument_default="latest",
        ),
        Command(("submit",), SUBMIT_OPTIONS, _submit, argument="experiment", argument_default=None),
    )
}

_INT = re.compile(r"0|[1-9][0-9]{0,8}")


class Parsed(NamedTuple):
    """A command line the fast path runs: the root's options, the command and its parameters."""

    root: dict[str, Any]
    command: Command
    params: dict[str, Any]


def _convert(opt: Opt, value: str) -> Any:
    """`value` as typer would coerce it for `opt`, or None when unsure (the full tree decides)."""
    if opt.kind in (Kind.TEXT, Kind.MULTI):
        return value
    if opt.kind is Kind.INT:
        return int(value) if _INT.fullmatch(value) and int(value) >= opt.minimum else None
    if opt.kind is Kind.FORMAT:
        return Format(value) if value in ("text", "json") else None
    return None


def _take(opt: Opt, arg: str, explicit: str | None, rest: list[str], params: dict[str, Any]) -> bool:
    """Apply one option occurrence (`arg` its name as written) to `params`; False when unsure."""
    if opt.kind is Kind.FLAG:
        if explicit is not None:
            return False
        params[opt.dest] = arg not in opt.off
        return True
    if explicit is None:
        if not rest or rest[0].startswith("-"):
            return False  # a missing value, or one click might read as an option: the full tree says
        explicit = rest.pop(0)
    value = _convert(opt, explicit)
    if value is None:
        return False
    if opt.kind is Kind.MULTI:
        params[opt.dest] = [*(params.get(opt.dest) or []), value]
    else:
        params[opt.dest] = value
    return True


def _option(arg: str, options: Sequence[Opt]) -> tuple[Opt | None, str | None]:
    """The option `arg` names (`--name`, `--name=value` or `-x`) and its attached value."""
    name, eq, attached = arg.partition("=") if arg.startswith("--") else (arg, "", "")
    if not arg.startswith("--") and len(arg) != 2:
        return None, None  # `-n5`, `-aF`: attached values and bundled flags go to the full tree
    for opt in options:
        if name in opt.names or name in opt.off:
            return opt, attached if eq else None
    return None, None


def _parse_options(
    args: list[str], options: Sequence[Opt], argument: str | None, *, interspersed: bool
) -> tuple[dict[str, Any], list[str]] | None:
    """Options (and, for a command, its one positional) from the front of `args`.

    A group (`interspersed=False`) stops at its first positional and returns it with what follows.
    None when the line holds anything this module does not parse exactly as click would.
    """
    params: dict[str, Any] = {o.dest: o.default for o in options}
    rest = list(args)
    positional: list[str] = []
    while rest:
        arg = rest[0]
        if arg in {"--", "-"}:
            return None
        if not arg.startswith("-"):
            if not interspersed:
                return params, rest
            positional.append(rest.pop(0))
            continue
        rest.pop(0)
        opt, attached = _option(arg, options)
        if opt is None or not _take(opt, arg.partition("=")[0], attached, rest, params):
            return None
    if positional:
        if argument is None or len(positional) > 1:
            return None
        params[argument] = positional[0]
    return params, []


def parse(argv: Sequence[str]) -> Parsed | None:
    """The command line as the full tree would parse it, or None to let the full tree run it."""
    try:
        for arg in argv:
            arg.encode("utf-8")  # undecodable bytes (surrogate escapes): typer decides what they mean
    except UnicodeEncodeError:
        return None
    root = _parse_options(list(argv), ROOT_OPTIONS, None, interspersed=False)
    if root is None:
        return None
    root_params, rest = root
    command = COMMANDS.get(tuple(rest[:2])) or COMMANDS.get(tuple(rest[:1]))
    if command is None:
        return None
    parsed = _parse_options(rest[len(command.path) :], command.options, command.argument, interspersed=True)
    if parsed is None:
        return None
    params = parsed[0]
    if command.argument is not None:
        params.setdefault(command.argument, command.argument_default)
        if params[command.argument] is None:
            return None  # a required positional missing: the full tree says so
    return Parsed(root_params, command, params)


def _version() -> int:
    import cli

    sys.stdout.write(f"sf {cli.__version__}\n")
    sys.stdout.flush()
    return 0


def run(argv: Sequence[str]) -> int | None:
    """Run `argv` on the fast path and return its exit code; None when the full tree must run it."""
    if list(argv) == ["--version"]:
        return _version()
    parsed = parse(argv)
    if parsed is None:
        return None
    from cli.context import AppState

    as_json = wants_json(argv)
    state = AppState(console_flag=parsed.root["console_addr"], fmt=parsed.root["output"], fast_reads=True)
    try:
        try:
            return parsed.command.run(state, parsed.params)
        finally:
            state.close()
    except BrokenPipeError:  # `sf job ls | head`: exit 1 quietly, as the typer tree does
        _silence_stdout()
        return EXIT_FAILURE
    except EOFError:  # as typer turns it into Abort and cli.app prints it
        sys.stderr.write("\n")
        print_error(CliError("aborted", EXIT_INTERRUPTED, code="CANCELLED"), as_json=as_json)
        return EXIT_INTERRUPTED
    except (Exception, KeyboardInterrupt) as exc:  # as cli.app.SfGroup.main does
        return report_failure(exc, as_json=as_json)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's last flush into a closed pipe is silent."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real stdout (a test's capture): nothing will be flushed into a pipe
        pass
