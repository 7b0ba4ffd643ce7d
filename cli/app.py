"""The command tree of `sf` (typer) and the one place its failures become exit codes.

`SfGroup.main` runs the click machinery in non-standalone mode and catches everything: usage
errors (exit 2), `CliError` (its own code), Ctrl-C (130) and, as a last resort, unexpected
exceptions (exit 1, one line; `SF_DEBUG=1` shows the traceback; see `cli.exits`). Because this
lives in the group's `main`, `typer.testing.CliRunner` sees exactly what a user's shell sees.

Commands are loaded lazily: the root group knows every command's name and the module that defines
it (`COMMANDS`), and imports that module only when the command runs (or when help lists them all),
so `sf job ls` does not pay for the imports of `sf submit` or `sf up`. The hot read commands
(`sf job ls`, `sf job status`, `sf job logs`, `sf --version`) usually never get here: `cli.main`
runs them through `cli.fastpath`, which falls back to this tree for anything it does not parse
exactly as this tree would.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import Annotated, Any

import typer
from typer._click import exceptions as click_exc  # typer vendors click; these are its exceptions
from typer.core import TyperGroup

import cli
from cli.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, CliError
from cli.exits import report_failure, wants_json
from cli.output import Format, print_error

# Every command of the root group, in the order help lists them: name -> (module, what it exports).
# "register" is a function that adds top-level commands to a Typer; any other name is a sub-Typer
# added as the group `name`. tests/unit/cli checks that this table matches what the modules define.
COMMANDS: dict[str, tuple[str, str]] = {
    "init": ("cli.commands.lab_cmds", "register"),
    "new": ("cli.commands.lab_cmds", "register"),
    "submit": ("cli.commands.submit_cmd", "register"),
    "login": ("cli.commands.account", "register"),
    "logout": ("cli.commands.account", "register"),
    "whoami": ("cli.commands.account", "register"),
    "up": ("cli.commands.console", "register"),
    "down": ("cli.commands.console", "register"),
    "job": ("cli.commands.job", "app"),
    "recipe": ("cli.commands.recipe", "app"),
    "token": ("cli.commands.account", "token_app"),
    "dataset": ("cli.commands.dataset", "app"),
    "secret": ("cli.commands.secret", "app"),
    "admin": ("cli.commands.admin", "app"),
}


def load_commands(module_name: str, export: str) -> dict[str, Any]:
    """The click commands `module_name` defines through `export` (see COMMANDS), by name."""
    module = importlib.import_module(module_name)
    holder = typer.Typer(rich_markup_mode="markdown")
    holder.callback()(lambda: None)  # with a callback, typer always builds a group (never a lone command)
    if export == "register":
        module.register(holder)
    else:
        holder.add_typer(
            getattr(module, export), name=next(n for n, v in COMMANDS.items() if v == (module_name, export))
        )
    group = typer.main.get_command(holder)
    assert isinstance(group, TyperGroup)
    return dict(group.commands)


class SfGroup(TyperGroup):
    """The root command group; see the module docstring."""

    _loaded: dict[str, Any]

    @property  # type: ignore[override]
    def commands(self) -> dict[str, Any]:
        """Every command, all modules loaded (what click's own walkers and the tests see)."""
        for name in COMMANDS:
            self._load(name)
        return self._loaded

    @commands.setter
    def commands(self, value: dict[str, Any]) -> None:
        self._loaded = dict(value)

    def _load(self, name: str) -> Any:
        if name not in self._loaded and name in COMMANDS:
            self._loaded.update(load_commands(*COMMANDS[name]))
        return self._loaded.get(name)

    def list_commands(self, ctx: Any) -> list[str]:
        return [*COMMANDS, *(n for n in self._loaded if n not in COMMANDS)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        return self._load(cmd_name)

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        as_json = wants_json(argv)
        code = EXIT_OK
        try:
            result = super().main(
                args=argv,
                prog_name=prog_name or "sf",
                complete_var=complete_var,
                standalone_mode=False,
                windows_expand_args=windows_expand_args,
                **extra,
            )
            code = result if isinstance(result, int) else EXIT_OK
        except click_exc.NoArgsIsHelpError as exc:  # `sf job`: show the group's help
            sys.stderr.write(exc.format_message() + "\n")
            code = EXIT_USAGE
        except click_exc.UsageError as exc:
            hint = None
            if exc.ctx is not None:
                hint = f"see `{exc.ctx.command_path} --help`"
            print_error(CliError(exc.format_message(), EXIT_USAGE, hint=hint, code="USAGE"), as_json=as_json)
            code = EXIT_USAGE
        except typer.Abort:
            print_error(CliError("aborted", EXIT_INTERRUPTED, code="CANCELLED"), as_json=as_json)
            code = EXIT_INTERRUPTED
        except click_exc.ClickException as exc:
            print_error(CliError(exc.format_message(), exc.exit_code, code="USAGE"), as_json=as_json)
            code = exc.exit_code
        except (Exception, KeyboardInterrupt) as exc:  # CliError, Ctrl-C, a closed pipe, a bug: cli.exits
            code = report_failure(exc, as_json=as_json)
        if standalone_mode:
            sys.exit(code)
        return code


app = typer.Typer(
    cls=SfGroup,
    name="sf",
    help=(
        "StarForge: run ML training jobs on GPU fleets.\n\n"
        "Typical session: `sf init`, `sf new my-exp --method custom/custom`, "
        "`git commit`, `sf submit my-exp --profile h200:8 -f`."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"sf {cli.__version__}")
        raise typer.Exit(0)


@app.callback()
def root(
    ctx: typer.Context,
    console_addr: Annotated[
        str | None,
        typer.Option(
            "--console",
            help="Console address HOST:PORT (overrides STARFORGE_CONSOLE and the client config).",
            metavar="HOST:PORT",
        ),
    ] = None,
    output: Annotated[
        Format,
        typer.Option("--output", "-o", help="text (default) or json: machine-readable output on stdout."),
    ] = Format.text,
    version: Annotated[
        bool,
        typer.Option("--version", help="Print the sf version and exit.", callback=_version_callback, is_eager=True),
    ] = False,
) -> None:
    """Global options apply to every command, e.g. `sf --console 10.0.0.5:7070 -o json job ls`."""
    from cli.context import AppState

    state = AppState(console_flag=console_addr, fmt=output)
    ctx.obj = state
    ctx.call_on_close(state.close)
