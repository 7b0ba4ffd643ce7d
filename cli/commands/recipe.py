"""`sf recipe ...`: the console's method catalog, and moving an experiment's lock forward."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text
from starforge_api.catalog.v1 import catalog_service_pb2, recipe_pb2

from cli import templates
from cli.commands.common import OutputOpt
from cli.context import app_state
from cli.errors import usage
from cli.output import message_to_dict

app = typer.Typer(
    help="The method catalog. Example: `sf recipe show trl/sft`.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)


@app.command("ls")
def ls_cmd(ctx: typer.Context, output: OutputOpt = None) -> None:
    """List the methods the console publishes, with their latest version.

    Example: `sf recipe ls`
    """
    st = app_state(ctx)
    out = st.output(output)
    client = st.client()
    resp = client.call(client.catalog.ListRecipes, catalog_service_pb2.ListRecipesRequest())
    if out.json:
        out.data(message_to_dict(resp))
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("METHOD", "VERSION", "DIGEST", "SUMMARY"):
        table.add_column(col, no_wrap=col != "SUMMARY")
    for r in resp.recipes:
        table.add_row(r.name, r.version, r.digest[:12], r.summary)
    out.show(table)
    out.info(f"catalog {resp.catalog_version} ({resp.catalog_digest[:12]})")


def _range(p: recipe_pb2.Parameter) -> str:
    if p.choices:
        return " | ".join(p.choices)
    if p.HasField("min") or p.HasField("max"):
        lo = f"{p.min:g}" if p.HasField("min") else ""
        hi = f"{p.max:g}" if p.HasField("max") else ""
        return f"[{lo}, {hi}]"
    return ""


def recipe_tables(recipe: recipe_pb2.Recipe) -> list[Any]:
    """Header, parameters and runtimes of one recipe."""
    head = Table.grid(padding=(0, 2))
    head.add_column(no_wrap=True, style="dim")
    head.add_column()
    for key, value in (
        ("method", f"{recipe.name} {recipe.version}"),
        ("digest", recipe.digest),
        ("adapter", recipe.adapter),
        ("entrypoint", recipe.entrypoint),
        (
            "needs",
            ", ".join(
                n for n, on in (("--model", recipe.requires_model), ("--train-data", recipe.requires_train_data)) if on
            ),
        ),
        ("profile", recipe.default_profile),
        ("pools", ", ".join(recipe.pool_names) + (" (multi-pool)" if recipe.multi_pool else "")),
        ("stages", ", ".join(recipe.stages)),
        ("metrics", ", ".join(recipe.metrics)),
        ("artifacts", ", ".join(recipe.artifacts)),
        ("observability", recipe.default_observability),
    ):
        if value.strip():
            head.add_row(key, value)
    params = Table(title="parameters", title_justify="left", box=None, pad_edge=False, header_style="bold")
    for col in ("KEY", "TYPE", "DEFAULT", "RANGE/CHOICES", "DOC"):
        params.add_column(col, overflow="fold", no_wrap=col in ("KEY", "TYPE"))
    for p in recipe.parameters:
        kind = recipe_pb2.ParameterType.Name(p.type).removeprefix("PARAMETER_TYPE_").lower()
        default = p.default_json or ("(required)" if p.required else "")
        params.add_row(p.key, kind, default, _range(p), p.doc)
    runtimes = Table(title="runtimes", title_justify="left", box=None, pad_edge=False, header_style="bold")
    for col in ("FRAMEWORK", "RUNTIME", "IMAGE", "PYTHON", "CAPABILITIES"):
        runtimes.add_column(col, overflow="fold")
    for rt in recipe.runtimes:
        runtimes.add_row(
            rt.framework_version + (" (default)" if rt.default else ""),
            rt.runtime_id,
            rt.image,
            rt.python,
            ", ".join(rt.capabilities),
        )
    parts: list[Any] = [head]
    if recipe.description:
        parts.append(Text("\n" + recipe.description))
    parts += [Text(""), params, Text(""), runtimes]
    return parts


@app.command("show")
def show_cmd(
    ctx: typer.Context,
    method: Annotated[str, typer.Argument(help="FRAMEWORK/METHOD, e.g. trl/sft.")],
    version: Annotated[str, typer.Option("--version", help="Recipe version (default: latest).")] = "",
    output: OutputOpt = None,
) -> None:
    """Show one method: its parameters (key, type, default, range, doc) and runtimes.

    Example: `sf recipe show custom/custom`
    """
    st = app_state(ctx)
    out = st.output(output)
    client = st.client()
    recipe = client.call(
        client.catalog.GetRecipe, catalog_service_pb2.GetRecipeRequest(name=method, version=version)
    ).recipe
    if out.json:
        out.data(message_to_dict(recipe))
        return
    for part in recipe_tables(recipe):
        out.show(part)


@app.command("upgrade")
def upgrade_cmd(
    ctx: typer.Context,
    experiment: Annotated[str, typer.Argument(help="Experiment whose recipe.lock.json to rewrite.")],
    framework_version: Annotated[
        str, typer.Option("--framework-version", help="Framework version (default: keep the current one).")
    ] = "",
    method_opt: Annotated[
        str, typer.Option("--method", help="Method, when recipe.lock.json is missing (default: the lock's).")
    ] = "",
    output: OutputOpt = None,
) -> None:
    """Rewrite an experiment's recipe.lock.json to the console's current recipe.

    Use it when submit says the lock is stale. Commit the new lock afterwards.

    Example: `sf recipe upgrade my-exp --framework-version 0.19.1`
    """
    st = app_state(ctx)
    out = st.output(output)
    lab = st.lab()
    exp = lab.experiment(experiment)
    old = exp.load_lock() if exp.lock_path.exists() else None
    method = method_opt or (old.method if old else "")
    if not method:
        raise usage(
            f"{exp.rel(exp.lock_path)} is missing, so the method is unknown",
            hint=f"pass it: `sf recipe upgrade {experiment} --method FRAMEWORK/METHOD`",
        )
    client = st.client()
    fv = framework_version or (old.framework_version if old else "")
    lock = client.call(
        client.catalog.ResolveLock,
        catalog_service_pb2.ResolveLockRequest(method=method, framework_version=fv),
    ).lock
    exp.lock_path.write_text(templates.lock_json(lock), encoding="utf-8")
    changed = old is None or message_to_dict(old) != message_to_dict(lock)
    if out.json:
        out.data(
            {
                "experiment": experiment,
                "changed": changed,
                "lock": message_to_dict(lock),
                "previous": message_to_dict(old) if old else None,
            }
        )
        return
    if not changed:
        out.success(f"{exp.rel(exp.lock_path)} is already current ({lock.method} {lock.version})")
        return
    before = f"{old.version} (framework {old.framework_version})" if old else "none"
    out.success(
        f"{exp.rel(exp.lock_path)}: {lock.method} {before} → {lock.version} (framework {lock.framework_version})"
    )
    out.info(f"commit it: `git commit -m 'upgrade {experiment} recipe' {exp.rel(exp.lock_path)}`")
