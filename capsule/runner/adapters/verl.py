"""verl/*: ``python3 -m verl.trainer.main_ppo`` with Hydra overrides (verl/trainer/config/ppo_trainer.yaml).

The config keys are verl's own dotted keys and become ``key=value`` overrides in the server's
order. The adapter owns what comes from the platform: the data files, the model, the pools
(``trainer.nnodes`` / ``trainer.n_gpus_per_node``; a second pool named ``rollout`` becomes verl's
standalone rollout replicas: ``actor_rollout_ref.rollout.nnodes`` / ``n_gpus_per_node`` with the
hybrid engine off and the V1 ``separate_async`` trainer, as in verl's own disaggregated example
scripts), checkpoints in FORGE_OUT_DIR with ``trainer.resume_mode=auto`` (verl resumes from the
latest ``global_step_*`` itself, so FORGE_RESUME needs no flag), and Hydra's run dir in scratch so
that nothing is written into the workspace.
"""

from __future__ import annotations

import pathlib
import re
from typing import Any

from ..errors import PrecheckError
from . import hydra, inputs, stages
from .base import AdapterContext, CommandSpec
from .logparse import VerlConsoleParser

ADVANTAGE_ESTIMATORS = {"grpo": "grpo", "ppo": "gae"}
OWNED = frozenset(
    {
        "algorithm.adv_estimator",
        "data.train_files",
        "data.val_files",
        "actor_rollout_ref.model.path",
        "actor_rollout_ref.hybrid_engine",
        "actor_rollout_ref.rollout.nnodes",
        "actor_rollout_ref.rollout.n_gpus_per_node",
        "trainer.nnodes",
        "trainer.n_gpus_per_node",
        "trainer.default_local_dir",
        "trainer.resume_mode",
        "trainer.experiment_name",
        "trainer.use_v1",
        "trainer.v1.trainer_mode",
        "hydra.run.dir",
    }
)
TRAIN_POOL, ROLLOUT_POOL = "train", "rollout"
STEP_DIR_RE = re.compile(r"^global_step_(\d+)$")
# verl's own record of its latest complete checkpoint (the step number), beside the step folders.
LATEST_FILE = "latest_checkpointed_iteration.txt"


def latest_checkpoint(checkpoints: pathlib.Path) -> tuple[pathlib.Path, int] | None:
    """global_step_<n> named by verl's latest file, else the highest one present."""
    try:
        step = int((checkpoints / LATEST_FILE).read_text().strip())
    except (OSError, ValueError):
        return stages.latest_numbered(checkpoints, STEP_DIR_RE)
    folder = checkpoints / f"global_step_{step}"
    return (folder, step) if folder.is_dir() else stages.latest_numbered(checkpoints, STEP_DIR_RE)


def _pools(ctx: AdapterContext) -> tuple[inputs.Pool, inputs.Pool | None]:
    """(trainer pool, standalone rollout pool or None)."""
    found = inputs.pools(ctx)
    if len(found) == 1:
        train, rollout = found[0], None
    else:
        by_name = {p.name: p for p in found}
        if set(by_name) != {TRAIN_POOL, ROLLOUT_POOL}:
            raise PrecheckError(
                f"{ctx.run.method} with several pools needs exactly '{TRAIN_POOL}' and '{ROLLOUT_POOL}' "
                f"(--profile {TRAIN_POOL}=h200:8 --profile {ROLLOUT_POOL}=h100:2); got {', '.join(by_name)}"
            )
        train, rollout = by_name[TRAIN_POOL], by_name[ROLLOUT_POOL]
    for pool in (train, rollout):
        if pool is not None and pool.gpus_per_node < 1:
            raise PrecheckError(f"{ctx.run.method} needs GPUs; pool {pool.name!r} is {pool.series} without GPUs")
    return train, rollout


def _logger(value: Any) -> list[str]:
    """trainer.logger with 'console' in it: StarForge reads verl's console lines."""
    loggers = [str(v) for v in value] if isinstance(value, list) else []
    return loggers if "console" in loggers else ["console", *loggers]


class VerlAdapter:
    name = "verl"

    def command(self, ctx: AdapterContext) -> CommandSpec:
        method = ctx.run.method.partition("/")[2]
        estimator = ADVANTAGE_ESTIMATORS.get(method)
        if estimator is None:
            known = ", ".join(f"verl/{m}" for m in ADVANTAGE_ESTIMATORS)
            raise PrecheckError(f"the verl adapter runs {known}; got {ctx.run.method}")
        if stages.is_stage(ctx):
            return stages.command(ctx, latest_checkpoint, ctx.workspace_dir)
        train_pool, rollout_pool = _pools(ctx)
        model = inputs.model(ctx, required=True)
        train = inputs.train_data(ctx, required=True)
        validation = inputs.validation_data(ctx)
        if not validation:
            raise PrecheckError(
                f"{ctx.run.method} validates on data.val_files: submit with --validation-data <lab-path> (parquet)"
            )
        config = inputs.flat_config(ctx.run.config)
        inputs.refuse_owned(config, OWNED, ctx.run.method)
        out = [
            f"algorithm.adv_estimator={estimator}",
            hydra.override("data.train_files", train),
            hydra.override("data.val_files", validation),
            hydra.override("actor_rollout_ref.model.path", model),
        ]
        if method == "ppo":
            critic = str(config.pop("critic.model.path", "") or "")
            out.append(hydra.override("critic.model.path", inputs.model_ref(ctx, critic) if critic else model))
        out += [f"trainer.nnodes={train_pool.nodes}", f"trainer.n_gpus_per_node={train_pool.gpus_per_node}"]
        if rollout_pool is not None:
            out += [
                "actor_rollout_ref.hybrid_engine=False",
                f"actor_rollout_ref.rollout.nnodes={rollout_pool.nodes}",
                f"actor_rollout_ref.rollout.n_gpus_per_node={rollout_pool.gpus_per_node}",
                "trainer.use_v1=True",
                "trainer.v1.trainer_mode=separate_async",
            ]
        out += [
            hydra.override("trainer.default_local_dir", str(inputs.out_dir(ctx) / "checkpoints")),
            "trainer.resume_mode=auto",
            hydra.override("trainer.experiment_name", ctx.run.experiment or "experiment"),
            hydra.override("hydra.run.dir", str(ctx.scratch_dir / "hydra")),
        ]
        config["trainer.logger"] = _logger(config.get("trainer.logger"))
        reward = str(config.get("custom_reward_function.path") or "")
        if reward:
            config["custom_reward_function.path"] = inputs.lab_file(ctx, reward, "custom_reward_function.path")
        for key, value in config.items():
            if value is not None and value != "":
                out.append(hydra.override(key, value))
        return CommandSpec(
            argv=["python3", "-m", "verl.trainer.main_ppo", *out],
            cwd=ctx.workspace_dir,
            name="verl main_ppo",
            display=f"python3 -m verl.trainer.main_ppo ({ctx.run.method})",
            metrics=VerlConsoleParser(),
        )
