"""Per-invocation state shared by all commands: global options, config, client, lab.

The root callback stores an `AppState` in click's context object; commands fetch it with
`app_state(ctx)`. It creates the gRPC client lazily (commands that work offline never touch the
network) and closes it when the command ends.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cli import config as client_config
from cli.errors import EXIT_AUTH, CliError
from cli.output import Format, Output

if TYPE_CHECKING:  # typer: the fast path (cli.fastpath) makes an AppState without it
    import typer

    from cli.client import Client
    from cli.fastclient import ReadClient
    from cli.lab import Lab


@dataclass
class AppState:
    """Global options and lazily created resources of one `sf` invocation."""

    console_flag: str | None = None
    fmt: Format = Format.text
    env: Mapping[str, str] = field(default_factory=lambda: os.environ)
    cwd: pathlib.Path | None = None
    # the fast path (cli.fastpath) reads over cli.fastclient's HTTP/2 instead of grpcio
    fast_reads: bool = False
    _client: Client | ReadClient | None = None

    def output(self, override: Format | None = None) -> Output:
        """The output for a command, honouring its own `-o` over the global one."""
        return Output(override or self.fmt)

    def config(self) -> client_config.ClientConfig:
        return client_config.load(self.env, self.console_flag)

    def require_token(self, address: str | None = None, token: str | None = None) -> str:
        """The token to send; refuses (exit 4) before any work when there is none."""
        cfg = self.config()
        secret = token or cfg.token
        if not secret:
            raise CliError(
                f"no personal access token for the console at {address or cfg.console}",
                EXIT_AUTH,
                hint="run `sf login` (or `sf up --detach` to start a local console and log in to it)",
                code="UNAUTHENTICATED",
            )
        return secret

    def client(self, *, console: str | None = None, token: str | None = None, need_token: bool = True) -> Client:
        """A client for the configured console; refuses early when there is no token.

        TLS comes from the client config, or from a grpcs:// `console`.
        """
        cfg = self.config()
        address = client_config.normalize_address(console) if console else cfg.console
        secret = self.require_token(address, token) if need_token else (token or cfg.token)
        if self._client is not None:
            self._client.close()
        tls = cfg.tls or (console is not None and client_config.uses_tls_scheme(console))
        from cli.client import Client  # grpc: only commands that talk to the console import it

        self._client = Client(address, secret, tls=tls, ca_file=cfg.ca_file, insecure=cfg.insecure)
        return self._client

    def reader(self) -> Client | ReadClient:
        """A client for the console's unary reads: `ReadClient` on the fast path, else `client()`."""
        if not self.fast_reads:
            return self.client()
        cfg = self.config()
        secret = self.require_token(cfg.console)
        if self._client is not None:
            self._client.close()
        from cli.fastclient import ReadClient

        self._client = ReadClient(cfg.console, secret, tls=cfg.tls, ca_file=cfg.ca_file, insecure=cfg.insecure)
        return self._client

    def lab(self) -> Lab:
        from cli.lab import find_lab

        return find_lab(self.cwd or pathlib.Path.cwd())

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def app_state(ctx: typer.Context) -> AppState:
    """The AppState of this invocation (a default one when a command is invoked on its own)."""
    root = ctx.find_root()
    if not isinstance(root.obj, AppState):
        root.obj = AppState()
        root.call_on_close(root.obj.close)
    return root.obj
