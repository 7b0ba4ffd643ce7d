"""`sf login`, `sf logout`, `sf whoami` and `sf token ...`: the personal access token of the CLI.

A token is checked with WhoAmI before it is saved, so a saved config always worked once. The
token is the only credential the CLI ever holds.
"""

from __future__ import annotations

import datetime as dt
import re
import sys
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text
from starforge_api.control.v1 import account_service_pb2

from cli import config as client_config
from cli.commands.common import OutputOpt
from cli.context import AppState, app_state
from cli.errors import EXIT_AUTH, CliError, usage
from cli.output import Output, age, message_to_dict, ts_to_datetime

token_app = typer.Typer(
    help="Personal access tokens. Example: `sf token create --name laptop --ttl 30d`.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)

_TTL = re.compile(r"^(\d+)\s*([smhdw]?)$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_ttl(text: str) -> int:
    """ "30d", "12h", "90m", "3600" → seconds; "never" or "0" → 0 (no expiry)."""
    value = text.strip().lower()
    if value in ("never", "none", "0"):
        return 0
    m = _TTL.match(value)
    if not m or int(m.group(1)) == 0:
        raise usage(f"--ttl {text!r}: expected a duration like 30d, 12h, 90m or never")
    return int(m.group(1)) * _UNIT_S[m.group(2)]


def _read_token(out: Output) -> str:
    if sys.stdin.isatty():
        token: str = typer.prompt("personal access token", hide_input=True)
    else:  # `echo $TOKEN | sf login`
        token = sys.stdin.readline()
    token = token.strip()
    if not token:
        raise usage("no token given: pass --token, type it at the prompt, or pipe it on stdin")
    return token


def login(state: AppState, console: str | None, token: str | None, out: Output) -> dict[str, Any]:
    """Check `token` against the console with WhoAmI, then save both to the client config."""
    cfg = state.config()
    address = client_config.normalize_address(console) if console else cfg.console
    secret = token or _read_token(out)
    client = state.client(console=console or address, token=secret)
    try:
        who = client.call(client.accounts.WhoAmI, account_service_pb2.WhoAmIRequest())
    except CliError as err:
        if err.exit_code == EXIT_AUTH:
            err.message = f"the console at {address} rejected this token; nothing was saved"
            err.hint = "check for a typo, or create a token with `sf token create` where you are logged in"
        raise
    tls = console is not None and client_config.uses_tls_scheme(console)
    client_config.save(cfg.path, console=address, token=secret, tls=tls or None)
    if state.env.get("STARFORGE_TOKEN") and state.env.get("STARFORGE_TOKEN") != secret:
        out.warn("STARFORGE_TOKEN is set in your environment and overrides the saved token")
    return {
        "console": address,
        "user": who.user.name,
        "admin": who.user.admin,
        "token_id": who.token.token_id,
        "config": str(cfg.path),
    }


def register(app: typer.Typer) -> None:
    """Add login, logout and whoami to the root app."""

    @app.command("login")
    def login_cmd(
        ctx: typer.Context,
        console: Annotated[
            str | None, typer.Option("--console", help="Console HOST:PORT (default: the configured one).")
        ] = None,
        token: Annotated[
            str | None, typer.Option("--token", help="The token (default: prompt; avoids shell history).")
        ] = None,
        output: OutputOpt = None,
    ) -> None:
        """Save a console address and personal access token, after checking them.

        Example: `sf login --console console.example.com:7070`
        """
        st = app_state(ctx)
        out = st.output(output)
        result = login(st, console or st.console_flag, token, out)
        if out.json:
            out.data(result)
            return
        role = " (admin)" if result["admin"] else ""
        out.success(f"logged in to {result['console']} as {result['user']}{role}; saved to {result['config']}")

    @app.command("logout")
    def logout_cmd(ctx: typer.Context) -> None:
        """Forget the saved token (the console address is kept).

        Example: `sf logout`
        """
        st = app_state(ctx)
        out = st.output()
        cfg = st.config()
        if not cfg.file_token:
            out.info(f"not logged in (no token in {cfg.path})")
            return
        client_config.save(cfg.path, console=cfg.file_console, token=None)
        out.success(f"logged out of {cfg.file_console or cfg.console}; token removed from {cfg.path}")
        if st.env.get("STARFORGE_TOKEN"):
            out.warn("STARFORGE_TOKEN is still set in your environment")

    @app.command("whoami")
    def whoami_cmd(ctx: typer.Context, output: OutputOpt = None) -> None:
        """Show who the console thinks you are, and with which token.

        Example: `sf whoami`
        """
        st = app_state(ctx)
        out = st.output(output)
        client = st.client()
        resp = client.call(client.accounts.WhoAmI, account_service_pb2.WhoAmIRequest())
        if out.json:
            out.data({"console": client.address, **message_to_dict(resp)})
            return
        role = " (admin)" if resp.user.admin else ""
        out.line(f"{resp.user.name}{role} on {client.address}")
        if resp.token.token_id:
            expires = _expiry(resp.token)
            out.info(f"token {resp.token.token_id}" + (f" '{resp.token.name}'" if resp.token.name else "") + expires)


def _expiry(info: account_service_pb2.TokenInfo) -> str:
    when = ts_to_datetime(info.expire_time)
    return f", expires {when.astimezone():%Y-%m-%d %H:%M}" if when else ", no expiry"


def _status(info: account_service_pb2.TokenInfo) -> Text:
    if info.HasField("revoke_time"):
        return Text("revoked", style="red")
    when = ts_to_datetime(info.expire_time)
    if when and when <= dt.datetime.now(dt.UTC):
        return Text("expired", style="yellow")
    return Text("active", style="green")


@token_app.command("create")
def token_create_cmd(
    ctx: typer.Context,
    name: Annotated[str, typer.Option("--name", help="A name for humans, e.g. laptop or ci.")] = "",
    ttl: Annotated[str, typer.Option("--ttl", help="Lifetime: 30d, 12h, 90m, or never.")] = "30d",
    user: Annotated[str, typer.Option("--user", help="Create it for another user (admins).")] = "",
    output: OutputOpt = None,
) -> None:
    """Create a personal access token. The secret is shown once: store it now.

    Example: `sf token create --name ci --ttl 90d`
    """
    st = app_state(ctx)
    out = st.output(output)
    seconds = parse_ttl(ttl)
    client = st.client()
    resp = client.call(
        client.accounts.CreateToken,
        account_service_pb2.CreateTokenRequest(name=name, ttl_seconds=seconds, user=user),
    )
    if out.json:
        out.data({"token": resp.token, "info": message_to_dict(resp.info)})
        return
    out.line(resp.token)
    out.warn(f"this is the only time token {resp.info.token_id} is shown{_expiry(resp.info)}; store it now")


@token_app.command("ls")
def token_ls_cmd(
    ctx: typer.Context,
    all_tokens: Annotated[bool, typer.Option("--all", "-a", help="Include revoked and expired tokens.")] = False,
    output: OutputOpt = None,
) -> None:
    """List your tokens (never their secrets).

    Example: `sf token ls --all`
    """
    st = app_state(ctx)
    out = st.output(output)
    client = st.client()
    resp = client.call(client.accounts.ListTokens, account_service_pb2.ListTokensRequest(include_inactive=all_tokens))
    if out.json:
        out.data({"tokens": [message_to_dict(t) for t in resp.tokens]})
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("ID", "NAME", "CREATED", "EXPIRES", "LAST USED", "STATUS"):
        table.add_column(col, no_wrap=True)
    for t in resp.tokens:
        expires = ts_to_datetime(t.expire_time)
        table.add_row(
            t.token_id,
            t.name,
            age(t.create_time) + " ago",
            f"{expires.astimezone():%Y-%m-%d}" if expires else "never",
            (age(t.last_use_time) + " ago") if t.HasField("last_use_time") else "-",
            _status(t),
        )
    out.show(table)


@token_app.command("revoke")
def token_revoke_cmd(
    ctx: typer.Context,
    token_id: Annotated[str, typer.Argument(help="Token id (sfp_...), from `sf token ls`.")],
    output: OutputOpt = None,
) -> None:
    """Revoke one of your tokens; it stops working at once.

    Example: `sf token revoke sfp_ab12cd34`
    """
    st = app_state(ctx)
    out = st.output(output)
    client = st.client()
    resp = client.call(client.accounts.RevokeToken, account_service_pb2.RevokeTokenRequest(token_id=token_id))
    if out.json:
        out.data({"info": message_to_dict(resp.info)})
        return
    out.success(f"revoked token {resp.info.token_id}")
