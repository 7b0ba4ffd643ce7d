"""`sf admin ...`: enrolling nodes and agent executors (admins only).

    sf admin node join-token NODE --fleet F [--ttl 1h]   # for the node's forgelet `join_token`
    sf admin executor-token --fleet F [--name N]         # for the agent executor's `control_token`

Both secrets are shown once. A join token is single use: the node's first registration spends it
and gets its own node credential; mint a new one to re-enrol a node whose state dir was lost.
"""

from __future__ import annotations

from typing import Annotated

import typer
from starforge_api.forgelet.v1 import node_registry_service_pb2 as reg_pb

from cli.commands.account import parse_ttl
from cli.commands.common import OutputOpt
from cli.context import app_state
from cli.output import message_to_dict, ts_to_datetime

app = typer.Typer(
    help="Administration: enrol nodes and agent executors. Example: `sf admin node join-token gpu-07 --fleet gpu`.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)
node_app = typer.Typer(
    help="Nodes of agent fleets. Example: `sf admin node join-token gpu-07 --fleet gpu`.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)
app.add_typer(node_app, name="node")


@node_app.command("join-token")
def join_token_cmd(
    ctx: typer.Context,
    node: Annotated[str, typer.Argument(help="The node's name (its forgelet `name`).")],
    fleet: Annotated[str, typer.Option("--fleet", help="The agent fleet the node joins.")],
    ttl: Annotated[str, typer.Option("--ttl", help="How long it may wait unused: 1h, 2d (at most 7d).")] = "1h",
    output: OutputOpt = None,
) -> None:
    """Mint a single-use join token for one node; put it in the node's forgelet config.

    Example: `sf admin node join-token gpu-07 --fleet gpu --ttl 2h`
    """
    st = app_state(ctx)
    out = st.output(output)
    client = st.client()
    resp = client.call(
        client.nodes.CreateJoinToken,
        reg_pb.CreateJoinTokenRequest(node=node, fleet=fleet, ttl_seconds=parse_ttl(ttl)),
    )
    if out.json:
        out.data(message_to_dict(resp))
        return
    out.line(resp.token)
    when = ts_to_datetime(resp.expire_time)
    expiry = f" (expires {when.astimezone():%Y-%m-%d %H:%M} if unused)" if when else ""
    out.warn(f"single use, shown once{expiry}: set it as `join_token` in {node}'s forgelet config")


@app.command("executor-token")
def executor_token_cmd(
    ctx: typer.Context,
    fleet: Annotated[str, typer.Option("--fleet", help="The agent fleet whose nodes the executor lists.")],
    name: Annotated[str, typer.Option("--name", help="A name for humans.")] = "",
    output: OutputOpt = None,
) -> None:
    """Mint a token for an agent executor (its `control_token`): it may list its fleet's nodes.

    Example: `sf admin executor-token --fleet gpu`
    """
    st = app_state(ctx)
    out = st.output(output)
    client = st.client()
    resp = client.call(client.nodes.CreateExecutorToken, reg_pb.CreateExecutorTokenRequest(fleet=fleet, name=name))
    if out.json:
        out.data(message_to_dict(resp))
        return
    out.line(resp.token)
    out.warn("shown once: set it as the agent executor's `control_token`")
