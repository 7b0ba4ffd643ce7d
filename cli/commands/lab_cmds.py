"""`sf init` and `sf new`: scaffolding a lab and its experiments."""

from __future__ import annotations

import getpass
import os
import pathlib
import stat
from typing import Annotated, Any

import typer
from starforge_api.catalog.v1 import catalog_service_pb2
from starforge_api.control.v1 import account_service_pb2

from cli import lab as labmod
from cli import templates
from cli.commands.common import OutputOpt
from cli.context import AppState, app_state
from cli.errors import CliError, usage
from cli.output import Output


def _whoami(state: AppState) -> str | None:
    """The console's name for the caller, or None when there is no reachable console/token."""
    cfg = state.config()
    if not cfg.token:
        return None
    try:
        client = state.client()
        resp = client.call(client.accounts.WhoAmI, account_service_pb2.WhoAmIRequest(), timeout=5)
    except CliError:
        return None
    name: str = resp.user.name
    return name or None


def _ensure_gitignore(root: pathlib.Path) -> bool:
    """Add `.starforge/` (the client's hash cache) to the lab's .gitignore; True when changed."""
    path = root / ".gitignore"
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if any(line.strip() in (templates.GITIGNORE_ENTRY, ".starforge", "/.starforge/") for line in text.splitlines()):
        return False
    prefix = "" if not text or text.endswith("\n") else "\n"
    path.write_text(text + prefix + "# StarForge client cache\n" + templates.GITIGNORE_ENTRY + "\n", encoding="utf-8")
    return True


def init_lab(
    state: AppState, directory: pathlib.Path, name: str | None, user: str | None, out: Output
) -> dict[str, Any]:
    """Create starforge.yaml, experiments/ and the .gitignore entry in `directory`."""
    root = directory.resolve()
    if (root / labmod.LAB_FILE).exists():
        raise usage(f"{root / labmod.LAB_FILE} already exists: this folder is already a lab")
    project_name = name or labmod.project_name_for(root)
    console_user = _whoami(state)
    who = console_user or user or os.environ.get("USER") or getpass.getuser()
    if user and console_user and user != console_user:
        out.warn(f"the console knows you as `{console_user}`; using it instead of --user {user}")
    project = f"@{who}/{project_name}"
    if not labmod.PROJECT_RE.match(project):
        raise usage(
            f"`{project}` is not a valid project name: user [a-z][a-z0-9-]{{1,31}}, "
            "name of lowercase letters, digits, '.', '_' and '-'",
            hint="pass --name NAME (and --user USER when offline)",
        )
    root.mkdir(parents=True, exist_ok=True)
    (root / labmod.LAB_FILE).write_text(templates.lab_yaml(project), encoding="utf-8")
    (root / labmod.EXPERIMENTS).mkdir(exist_ok=True)
    gitignore = _ensure_gitignore(root)
    files = [labmod.LAB_FILE, labmod.EXPERIMENTS + "/"] + ([".gitignore"] if gitignore else [])
    return {"project": project, "root": str(root), "files": files, "user_from_console": console_user is not None}


def register(app: typer.Typer) -> None:
    """Add `init` and `new` to the root app."""

    @app.command("init")
    def init_cmd(
        ctx: typer.Context,
        directory: Annotated[
            pathlib.Path, typer.Argument(help="Folder to make a lab (default: here).")
        ] = pathlib.Path(),
        name: Annotated[str | None, typer.Option("--name", help="Project name (default: the folder name).")] = None,
        user: Annotated[
            str | None,
            typer.Option("--user", help="Your user name when the console is not reachable (default: $USER)."),
        ] = None,
        output: OutputOpt = None,
    ) -> None:
        """Make a folder a StarForge lab: writes starforge.yaml and experiments/.

        The project is "@<you>/<name>"; your name comes from the console when it is reachable.

        Example: `sf init my-lab --name grpo-study`
        """
        state = app_state(ctx)
        out = state.output(output)
        result = init_lab(state, directory, name, user, out)
        if out.json:
            out.data(result)
            return
        out.success(f"initialized lab {result['project']} in {result['root']}")
        root = pathlib.Path(result["root"])
        in_git = any((p / ".git").exists() for p in (root, *root.parents))
        steps = ["sf new my-exp --method custom/custom"]
        if not in_git:
            steps.insert(0, "git init")
        steps.append("git add -A && git commit -m 'first experiment'")
        steps.append("sf submit my-exp --profile cpu -f")
        out.info("next: " + "  →  ".join(f"`{s}`" for s in steps))

    @app.command("new")
    def new_cmd(
        ctx: typer.Context,
        experiment: Annotated[str, typer.Argument(help="Experiment name (folder under experiments/).")],
        method: Annotated[str, typer.Option("--method", "-m", help="Catalog method, e.g. custom/custom or trl/sft.")],
        framework_version: Annotated[
            str | None, typer.Option("--framework-version", help="Framework version (default: the recipe's).")
        ] = None,
        output: OutputOpt = None,
    ) -> None:
        """Create experiments/EXPERIMENT: config.yaml, recipe.lock.json (and train.sh for custom/custom).

        The lock pins the recipe version the console publishes now (`sf recipe upgrade` moves it).

        Example: `sf new my-grpo --method custom/custom`
        """
        state = app_state(ctx)
        out = state.output(output)
        result = new_experiment(state, experiment, method, framework_version or "")
        if out.json:
            out.data(result)
            return
        out.success(f"created experiments/{experiment}/ ({', '.join(result['files'])}) for {result['method']}")
        if result["method"] == labmod.CUSTOM_METHOD:
            out.info(f"next: edit experiments/{experiment}/train.sh and set `image:` in config.yaml, then commit")
        out.info(f"then: `sf submit {experiment} --profile <series>:<gpus>`")


def new_experiment(state: AppState, name: str, method: str, framework_version: str) -> dict[str, Any]:
    """Resolve the lock on the console and write the experiment's files; never overwrites."""
    lab = state.lab()
    labmod.check_experiment_name(name)
    folder = lab.experiments_dir / name
    if folder.exists():
        raise usage(
            f"experiment `{name}` already exists at {folder}; refusing to overwrite it",
            hint="pick another name, or delete the folder first",
        )
    if "/" not in method:
        raise usage(f"--method {method!r}: expected FRAMEWORK/METHOD, e.g. custom/custom or trl/sft")
    client = state.client()
    lock = client.call(
        client.catalog.ResolveLock,
        catalog_service_pb2.ResolveLockRequest(method=method, framework_version=framework_version),
    ).lock
    files: dict[str, str] = {labmod.LOCK: templates.lock_json(lock)}
    if lock.method == labmod.CUSTOM_METHOD:
        files[labmod.CONFIG] = templates.custom_config(name, lock)
        files[labmod.TRAIN_SH] = templates.train_sh(name)
    else:
        recipe = client.call(
            client.catalog.GetRecipe, catalog_service_pb2.GetRecipeRequest(name=lock.method, version=lock.version)
        ).recipe
        files[labmod.CONFIG] = templates.recipe_config(name, recipe, lock)
    folder.mkdir(parents=True)
    for filename, content in files.items():
        (folder / filename).write_text(content, encoding="utf-8")
    if labmod.TRAIN_SH in files:
        sh = folder / labmod.TRAIN_SH
        sh.chmod(sh.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    order = [f for f in (labmod.CONFIG, labmod.LOCK, labmod.TRAIN_SH) if f in files]
    return {
        "experiment": name,
        "path": str(folder),
        "method": lock.method,
        "recipe_version": lock.version,
        "framework_version": lock.framework_version,
        "files": order,
    }
