"""nemo-rl/*: NeMo-RL's run scripts, ``python examples/run_<x>.py --config <yaml> key=value ...``.

The scripts and the YAMLs they load (with relative paths such as ``examples/prompts/cot.txt``)
live in the NeMo-RL checkout of the image, so the command runs there: ``$NEMO_RL_HOME``, or
``/opt/nemo-rl`` where NVIDIA's NeMo-RL container has it. Lab paths in the config are therefore
made absolute. Config keys are NeMo-RL's own and become Hydra-style overrides on top of
``base_config`` (a StarForge key the adapter consumes); ``grpo.kl_coef`` is a StarForge alias of
``loss_fn.reference_policy_kl_penalty``. The adapter owns the cluster shape (from the pool), the
checkpoint and log directories (FORGE_OUT_DIR; NeMo-RL resumes from the latest checkpoint there
by itself) and, when the flags are given, the model and data paths.
"""

from __future__ import annotations

import pathlib
import re
from typing import Any

from ..errors import PrecheckError
from . import hydra, inputs, stages
from .base import AdapterContext, CommandSpec
from .logparse import NemoRlLogParser

# The run scripts of NeMo-RL's examples/ (checked against the pinned upstream tree by
# recipes/frameworks/nemo-rl/<version>/, see tests/unit/recipes/test_framework_configs.py).
SCRIPTS = {"sft": "examples/run_sft.py", "grpo": "examples/run_grpo.py"}
# NeMo-RL's dataset class for a JSONL file of input/output records; the base configs name a
# built-in dataset instead, so --train-data / --validation-data switch it.
RESPONSE_DATASET = "ResponseDataset"
HOME_VARIABLE = "NEMO_RL_HOME"
DEFAULT_HOME = "/opt/nemo-rl"
BASE_CONFIG_KEY = "base_config"
STEP_DIR_RE = re.compile(r"^step_(\d+)$")
ALIASES = {"grpo.kl_coef": "loss_fn.reference_policy_kl_penalty"}
OWNED = frozenset(
    {
        "cluster.num_nodes",
        "cluster.gpus_per_node",
        "checkpointing.checkpoint_dir",
        "logger.log_dir",
        "data.train.data_path",
        "data.validation.data_path",
    }
)


def latest_checkpoint(checkpoints: pathlib.Path) -> tuple[pathlib.Path, int] | None:
    """NeMo-RL's step_<n> checkpoint folder with the highest n."""
    return stages.latest_numbered(checkpoints, STEP_DIR_RE)


def _base_config(ctx: AdapterContext, home: pathlib.Path, value: str) -> str:
    """base_config: a path in the NeMo-RL checkout, or a lab path (the lab wins when both exist)."""
    lab = ctx.workspace_dir / value
    if not value.startswith("/") and lab.is_file():
        return str(lab)
    path = home / value
    if not path.is_file():
        raise PrecheckError(f"base_config {value}: not in the NeMo-RL checkout ({home}) nor in the packed lab")
    return value


def _data_overrides(ctx: AdapterContext, config: dict[str, Any]) -> list[str]:
    """--train-data / --validation-data as NeMo-RL ResponseDatasets.

    ``data_path`` is not a key of the base configs (only their comments show it), so it is
    force-added (``++``); ``data.validation`` is null in the GRPO configs, which ``++`` replaces.
    """
    out = []
    train = inputs.train_data(ctx, required=False)
    if train:
        config["data.train.dataset_name"] = RESPONSE_DATASET
        out.append("++" + hydra.override("data.train.data_path", train))
    validation = inputs.validation_data(ctx)
    if validation:
        out.append("++" + hydra.override("data.validation.dataset_name", RESPONSE_DATASET))
        out.append("++" + hydra.override("data.validation.data_path", validation))
    return out


class NemoRlAdapter:
    name = "nemo-rl"

    def command(self, ctx: AdapterContext) -> CommandSpec:
        method = ctx.run.method.partition("/")[2]
        script = SCRIPTS.get(method)
        if script is None:
            raise PrecheckError(f"the nemo-rl adapter runs nemo-rl/{', nemo-rl/'.join(SCRIPTS)}; got {ctx.run.method}")
        home = pathlib.Path(ctx.environ.get(HOME_VARIABLE) or DEFAULT_HOME)
        if stages.is_stage(ctx):
            return stages.command(ctx, latest_checkpoint, home)
        if not (home / script).is_file():
            raise PrecheckError(
                f"{home / script} not found: {ctx.run.method} runs NeMo-RL's script from its checkout "
                f"(set {HOME_VARIABLE} in the image or with --env {HOME_VARIABLE}=<dir>)"
            )
        pool = inputs.single_pool(ctx)
        if pool.gpus_per_node < 1:
            raise PrecheckError(f"{ctx.run.method} needs GPUs; pool {pool.name!r} is {pool.series} without GPUs")
        config = inputs.apply_aliases(inputs.flat_config(ctx.run.config), ALIASES)
        inputs.refuse_owned(config, OWNED, ctx.run.method)
        base = _base_config(ctx, home, str(config.pop(BASE_CONFIG_KEY, "") or ""))
        model = inputs.model(ctx, required=False)
        if model:
            config["policy.model_name"] = model
        elif config.get("policy.model_name"):
            # A lab path in the config must stay valid from the NeMo-RL checkout.
            config["policy.model_name"] = inputs.model_ref(ctx, str(config["policy.model_name"]))
        out = [
            f"cluster.num_nodes={pool.nodes}",
            f"cluster.gpus_per_node={pool.gpus_per_node}",
            hydra.override("checkpointing.checkpoint_dir", str(inputs.out_dir(ctx) / "checkpoints")),
            hydra.override("logger.log_dir", str(inputs.out_dir(ctx) / "logs")),
        ]
        out.extend(_data_overrides(ctx, config))
        for key, value in config.items():
            if value is not None and value != "":
                out.append(hydra.override(key, value))
        return CommandSpec(
            argv=["python", script, "--config", base, *out],
            cwd=home,
            name=pathlib.Path(script).name,
            display=f"python {script} ({ctx.run.method})",
            metrics=NemoRlLogParser(),
        )
