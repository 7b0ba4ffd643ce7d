"""`sf dataset ...`: versioned platform datasets, uploaded content-addressed like workspaces."""

from __future__ import annotations

import hashlib
import os
import pathlib
from typing import Annotated

import typer
from rich.table import Table
from starforge_api.control.v1 import dataset_service_pb2

from cli.commands.common import OutputOpt
from cli.context import app_state
from cli.hashcache import HashCache
from cli.output import age, human_bytes, message_to_dict, timestamp_text
from cli.pack import pack_directory
from cli.upload import upload_files

app = typer.Typer(
    help="Platform datasets (mounted into jobs by name). Example: `sf dataset push chat ./data`.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)
MAX_FILES_SHOWN = 50


def _cache_for(folder: pathlib.Path) -> HashCache:
    """Digest cache outside the dataset folder (we never write into user data)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(pathlib.Path.home() / ".cache")
    key = hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:16]
    return HashCache(pathlib.Path(base) / "starforge" / "datasets" / f"{key}.json")


@app.command("push")
def push_cmd(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Dataset name, e.g. chat-sft.")],
    folder: Annotated[pathlib.Path, typer.Argument(help="Folder with the dataset's files.")],
    version: Annotated[str, typer.Option("--version", help="Version (default: the next v<N>).")] = "",
    description: Annotated[str, typer.Option("--description", "-d", help="What the data is.")] = "",
    output: OutputOpt = None,
) -> None:
    """Upload a folder as a new, immutable dataset version.

    Example: `sf dataset push chat-sft ./data/chat --version v2`
    """
    st = app_state(ctx)
    out = st.output(output)
    client = st.client()
    pack = pack_directory(folder, cache=_cache_for(folder))
    stats = upload_files(client, pack.files, out)
    out.info(stats.summary())
    resp = client.call(
        client.datasets.PushDataset,
        dataset_service_pb2.PushDatasetRequest(
            name=name, version=version, manifest=pack.manifest, description=description
        ),
    )
    ds = resp.dataset
    if out.json:
        out.data({"dataset": message_to_dict(ds)})
        return
    out.success(
        f"pushed {ds.owner}/{ds.name}@{ds.version} ({len(pack.files)} files, {human_bytes(pack.manifest.total_bytes)})"
    )
    out.info(f"use it: `sf submit EXP --train-dataset {ds.owner}/{ds.name}@{ds.version}`")


@app.command("ls")
def ls_cmd(
    ctx: typer.Context,
    owner: Annotated[str, typer.Option("--owner", help="Only this owner's datasets.")] = "",
    output: OutputOpt = None,
) -> None:
    """List datasets with their latest version.

    Example: `sf dataset ls --owner alice`
    """
    st = app_state(ctx)
    out = st.output(output)
    client = st.client()
    resp = client.call(client.datasets.ListDatasets, dataset_service_pb2.ListDatasetsRequest(owner=owner))
    if out.json:
        out.data({"datasets": [message_to_dict(d) for d in resp.datasets]})
        return
    if not resp.datasets:
        out.info("no datasets")
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("DATASET", "LATEST", "VERSIONS", "AGE", "DESCRIPTION"):
        table.add_column(col, no_wrap=col != "DESCRIPTION")
    for d in resp.datasets:
        table.add_row(f"{d.owner}/{d.name}", d.version, str(len(d.versions) or 1), age(d.create_time), d.description)
    out.show(table)


@app.command("show")
def show_cmd(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(help="OWNER/NAME[@VERSION] (default version: latest).")],
    output: OutputOpt = None,
) -> None:
    """Show one dataset version and its files.

    Example: `sf dataset show alice/chat-sft@v2`
    """
    st = app_state(ctx)
    out = st.output(output)
    client = st.client()
    ds = client.call(client.datasets.GetDataset, dataset_service_pb2.GetDatasetRequest(ref=ref)).dataset
    if out.json:
        out.data({"dataset": message_to_dict(ds)})
        return
    m = ds.manifest
    out.line(f"{ds.owner}/{ds.name}@{ds.version}  {len(m.files)} files, {human_bytes(m.total_bytes)}")
    out.line(f"pushed {timestamp_text(ds.create_time)}; versions: {', '.join(ds.versions) or ds.version}")
    if ds.description:
        out.line(ds.description)
    out.line(f"digest {m.digest}")
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("PATH", "SIZE", "SHA256"):
        table.add_column(col, no_wrap=True)
    for f in m.files[:MAX_FILES_SHOWN]:
        table.add_row(f.path, human_bytes(f.size), f.sha256[:12])
    out.show(table)
    if len(m.files) > MAX_FILES_SHOWN:
        out.info(f"… and {len(m.files) - MAX_FILES_SHOWN} more (see -o json)")
