"""`sf submit`'s typer declaration: its options and help; the flow is `cli.commands.submit`.

Kept apart so that `cli.fastpath`, which parses the same lines without typer and runs the same
flow, never imports typer (nor pydantic, which typer coerces every option through).
"""

from __future__ import annotations

from typing import Annotated

import typer

from cli.commands.common import OutputOpt
from cli.commands.submit import run_submit
from cli.context import app_state

ProfileOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--profile", "-p", help="Hardware: SERIES[:GPUS], or NAME=SERIES[:GPUS] per pool (repeat).", metavar="PROFILE"
    ),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set", "-s", help="Override a config key for this run, KEY=VALUE (repeat; order kept).", metavar="K=V"
    ),
]


def register(app: typer.Typer) -> None:
    """Add `submit` to the root app."""

    @app.command("submit")
    def submit_cmd(
        ctx: typer.Context,
        experiment: Annotated[str, typer.Argument(help="Experiment name (experiments/<name>/).")],
        profile: ProfileOpt = None,
        overrides: SetOpt = None,
        model: Annotated[str, typer.Option("--model", help="HuggingFace id or lab path of the model.")] = "",
        train_data: Annotated[
            str, typer.Option("--train-data", help="Training data: lab path (or path inside --train-dataset).")
        ] = "",
        validation_data: Annotated[str, typer.Option("--validation-data", help="Validation data: lab path.")] = "",
        train_dataset: Annotated[
            str, typer.Option("--train-dataset", help="Platform dataset OWNER/NAME[@VERSION] for training.")
        ] = "",
        image: Annotated[str, typer.Option("--image", help="Image to run (wins over config.yaml `image`).")] = "",
        framework_version: Annotated[
            str, typer.Option("--framework-version", help="Framework version (default: recipe.lock.json's).")
        ] = "",
        upgrade_recipe: Annotated[
            bool, typer.Option("--upgrade-recipe", help="Rewrite recipe.lock.json to the console's latest and use it.")
        ] = False,
        observability_url: Annotated[
            str,
            typer.Option(
                "--observability-url",
                help="External tracker URL (http/https): external observability. The job gets it as "
                "STARFORGE_OBSERVABILITY_URL and as the tool's own variable (W&B: WANDB_BASE_URL, "
                "MLflow: MLFLOW_TRACKING_URI).",
            ),
        ] = "",
        observability_tool: Annotated[
            str,
            typer.Option(
                "--observability-tool",
                help="The tracker of --observability-url: wandb or mlflow. Default: told by the URL "
                "(a host or path with 'wandb' or 'mlflow' in it).",
            ),
        ] = "",
        then: Annotated[
            list[str] | None, typer.Option("--then", help="Stage to run after training succeeds (repeat).")
        ] = None,
        retries: Annotated[
            int | None, typer.Option("--retries", help="Automatic retries for infra failures (default: server's).")
        ] = None,
        priority: Annotated[int, typer.Option("--priority", help="Queue priority, -100..100; higher first.")] = 0,
        queue: Annotated[
            str,
            typer.Option(
                "--queue",
                help="Named queue: only fleets that serve it (the console's fleets[].queues) run the job; "
                "an unknown queue is refused with the console's list. Default: the default queue.",
            ),
        ] = "",
        fleet: Annotated[str, typer.Option("--fleet", help="Pin to one fleet.")] = "",
        label: Annotated[list[str] | None, typer.Option("--label", help="Label KEY=VALUE (repeat).")] = None,
        env: Annotated[
            list[str] | None, typer.Option("--env", help="Environment KEY=VALUE for training (never secrets).")
        ] = None,
        secret: Annotated[
            list[str] | None,
            typer.Option(
                "--secret",
                help="Give the job secret NAME (see `sf secret`) as $NAME, or as $ENV_VAR (repeat).",
                metavar="NAME[=ENV_VAR]",
            ),
        ] = None,
        allow_dirty: Annotated[
            bool, typer.Option("--allow-dirty", help="Submit with uncommitted changes (recorded as dirty).")
        ] = False,
        no_validate: Annotated[
            bool, typer.Option("--no-validate", help="Skip local checks the console repeats anyway.")
        ] = False,
        dry_run: Annotated[
            bool, typer.Option("--dry-run", help="Let the console validate and resolve the job without queueing it.")
        ] = False,
        follow: Annotated[
            bool, typer.Option("--follow", "-f", help="Follow the logs; exit 0 only if the job SUCCEEDED.")
        ] = False,
        output: OutputOpt = None,
    ) -> None:
        """Submit an experiment as a job: validate, pack the lab from git, upload, queue.

        Only committed files are packed (plus `package.include`); a dirty tree needs --allow-dirty.

        Example: `sf submit my-grpo --profile h200:8 -s grpo.kl_coef=0.05 -f`
        """
        params = {k: v for k, v in locals().items() if k != "ctx"}
        code = run_submit(app_state(ctx), params)
        if code:
            raise typer.Exit(code)
