"""`sf secret set|ls|rm`: secrets a job names with `--secret` or config.yaml `secrets:`.

The value is read from stdin (a hidden prompt on a terminal) or from `--from-file`, never from
the command line, where shell history and `ps` would keep it; it is never printed back. One
trailing newline is dropped (what `echo` and most editors add).
"""

from __future__ import annotations

import pathlib
import sys
from typing import Annotated

import typer
from rich.table import Table
from starforge_api.control.v1 import secret_service_pb2 as pb

from cli.commands.common import OutputOpt
from cli.context import AppState, app_state
from cli.errors import usage
from cli.output import age, message_to_dict

app = typer.Typer(
    help=(
        "Secrets for jobs (API keys, tokens), per user or per project. "
        "Example: `sf secret set WANDB_API_KEY < key.txt`, then `sf submit exp --secret WANDB_API_KEY`."
    ),
    no_args_is_help=True,
    rich_markup_mode="markdown",
)

MAX_VALUE_BYTES = 64 * 1024

ProjectOpt = Annotated[
    str,
    typer.Option(
        "--project",
        help="A project's secrets, @USER/NAME, or `.` for this lab's project (default: your own).",
        metavar="PROJECT",
    ),
]


def _project(state: AppState, project: str) -> str:
    return state.lab().settings.project if project == "." else project


def _drop_newline(value: str) -> str:
    return value[:-2] if value.endswith("\r\n") else value[:-1] if value.endswith("\n") else value


def read_value(from_file: pathlib.Path | None) -> str:
    """The secret's value: --from-file, else stdin (a hidden prompt on a terminal)."""
    if from_file is not None:
        try:
            data = from_file.read_bytes()
        except OSError as e:
            raise usage(f"--from-file {from_file}: {e.strerror}") from None
        if len(data) > MAX_VALUE_BYTES:
            raise usage(f"--from-file {from_file}: a secret holds at most {MAX_VALUE_BYTES // 1024} KiB")
        try:
            value = data.decode()
        except UnicodeDecodeError:
            raise usage(f"--from-file {from_file}: not UTF-8 text (base64-encode binary values)") from None
    elif sys.stdin.isatty():
        value = typer.prompt("secret value", hide_input=True, confirmation_prompt=True)
    else:  # `sf secret set NAME < file`, `printenv X | sf secret set NAME`
        value = sys.stdin.read(MAX_VALUE_BYTES + 2)
    value = _drop_newline(value)
    if not value:
        raise usage("no value given: pipe it on stdin, type it at the prompt, or pass --from-file FILE")
    return value


def _scope_text(secret: pb.Secret) -> str:
    return f"project {secret.project}" if secret.scope == pb.SECRET_SCOPE_PROJECT else f"user {secret.owner}"


@app.command("set")
def set_cmd(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Secret name, e.g. WANDB_API_KEY (also the default variable).")],
    stray: Annotated[list[str] | None, typer.Argument(hidden=True, show_default=False)] = None,
    from_file: Annotated[
        pathlib.Path | None, typer.Option("--from-file", help="Read the value from FILE instead of stdin.")
    ] = None,
    project: ProjectOpt = "",
    output: OutputOpt = None,
) -> None:
    """Create a secret or replace its value. The value comes from stdin or --from-file, never argv.

    Example: `sf secret set HF < ~/.cache/huggingface/token`, `sf secret set WANDB_API_KEY --project .`
    """
    if stray:  # a value typed on the command line: refuse without echoing it back
        raise usage(
            "sf secret set takes the value on stdin or from --from-file, never as an argument "
            "(shell history and `ps` would keep it)",
            hint="`sf secret set NAME < file`, or run `sf secret set NAME` and type it at the prompt",
        )
    state = app_state(ctx)
    out = state.output(output)
    scope = _project(state, project)
    state.require_token()
    value = read_value(from_file)
    client = state.client()
    resp = client.call(client.secrets.SetSecret, pb.SetSecretRequest(name=name, value=value, project=scope))
    if out.json:
        out.data({"secret": message_to_dict(resp.secret), "created": resp.created})
        return
    verb = "created" if resp.created else "updated"
    out.success(f"{verb} secret {resp.secret.name} ({_scope_text(resp.secret)})")
    out.info(f"jobs get it with `sf submit <exp> --secret {resp.secret.name}[=ENV_VAR]` or config.yaml `secrets:`")


@app.command("ls")
def ls_cmd(ctx: typer.Context, project: ProjectOpt = "", output: OutputOpt = None) -> None:
    """List your secrets, or a project's: names and times, never values.

    Example: `sf secret ls`, `sf secret ls --project @alice/lab`
    """
    state = app_state(ctx)
    out = state.output(output)
    scope = _project(state, project)
    client = state.client()
    resp = client.call(client.secrets.ListSecrets, pb.ListSecretsRequest(project=scope))
    if out.json:
        out.data({"secrets": [message_to_dict(s) for s in resp.secrets]})
        return
    if not resp.secrets:
        out.info(f"no secrets for {scope or 'you'} yet; create one with `sf secret set NAME < file`")
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("NAME", "SCOPE", "CREATED", "UPDATED", "SET BY"):
        table.add_column(col, no_wrap=True)
    for s in resp.secrets:
        table.add_row(s.name, _scope_text(s), age(s.create_time) + " ago", age(s.update_time) + " ago", s.updated_by)
    out.show(table)


@app.command("rm")
def rm_cmd(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Secret name.")],
    project: ProjectOpt = "",
    output: OutputOpt = None,
) -> None:
    """Delete a secret. Queued jobs that name it fail when they would start.

    Example: `sf secret rm WANDB_API_KEY`
    """
    state = app_state(ctx)
    out = state.output(output)
    scope = _project(state, project)
    client = state.client()
    resp = client.call(client.secrets.DeleteSecret, pb.DeleteSecretRequest(name=name, project=scope))
    if out.json:
        out.data({"secret": message_to_dict(resp.secret)})
        return
    out.success(f"deleted secret {resp.secret.name} ({_scope_text(resp.secret)})")
