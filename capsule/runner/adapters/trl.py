"""trl/*: TRL's own CLI, ``trl <method> --flag value ...`` (trl/scripts/<method>.py).

The config keys are TRL's flag names, written as ``--key value`` in the server's order; the
adapter owns the flags that come from the platform (--model, --train-data, the pool, FORGE_OUT_DIR,
FORGE_RESUME). ``trl`` launches the script through ``accelerate launch`` itself and takes
accelerate's flags, so a pool of N > 1 GPUs adds ``--num_processes N``. Data files are handed to
``datasets.load_dataset`` as a folder with ``train.<ext>`` (and ``test.<ext>``) links, the form in
which it takes local files with both splits.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
from typing import Any

from ..errors import PrecheckError
from . import inputs, stages
from .base import AdapterContext, CommandSpec
from .logparse import HfTrainerLogParser

METHODS = ("sft", "dpo", "kto", "grpo")
# Flags the adapter sets; a config key of the same name would be set twice.
OWNED = frozenset(
    {
        "model_name_or_path",
        "dataset_name",
        "dataset_train_split",
        "dataset_test_split",
        "output_dir",
        "logging_strategy",
        "resume_from_checkpoint",
        "num_processes",
    }
)
CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
DATA_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet", ".arrow", ".txt")
DEFAULT_LOGGING_STEPS = 10


def _flag_values(value: Any) -> list[str] | None:
    """argv words after ``--key``; None leaves the flag out (empty string or list: TRL's default)."""
    if value is None or value in ("", []):
        return None
    if isinstance(value, bool):
        return ["true" if value else "false"]
    if isinstance(value, list):
        return [str(v) for v in value]
    return [str(value)]


def latest_checkpoint(checkpoints: pathlib.Path) -> tuple[pathlib.Path, int] | None:
    """The complete HF Trainer checkpoint with the highest step under ``checkpoints``: the Trainer
    writes trainer_state.json last, so a checkpoint cut short by a pause has none and is skipped."""
    return stages.latest_numbered(checkpoints, CHECKPOINT_RE, complete_marker="trainer_state.json")


def _dataset_folder(ctx: AdapterContext, train: str, validation: str) -> tuple[str, bool]:
    """(--dataset_name value, has a test split)."""
    if os.path.isdir(train):
        if validation:
            raise PrecheckError(
                f"--train-data {ctx.run.train_data} is a dataset folder: put the validation split in it "
                "(test.<ext>) instead of passing --validation-data"
            )
        return train, False
    folder = ctx.scratch_dir / "trl-dataset"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for split, path in (("train", train), ("test", validation)):
        if not path:
            continue
        suffix = "".join(pathlib.Path(path).suffixes[-1:]).lower()
        if suffix not in DATA_SUFFIXES:
            raise PrecheckError(
                f"{path}: TRL reads {', '.join(DATA_SUFFIXES)} files or a dataset folder; got {suffix or 'no suffix'}"
            )
        (folder / f"{split}{suffix}").symlink_to(path)
    return str(folder), bool(validation)


class TrlAdapter:
    name = "trl"

    def command(self, ctx: AdapterContext) -> CommandSpec:
        method = ctx.run.method.partition("/")[2]
        if method not in METHODS:
            raise PrecheckError(f"the trl adapter runs trl/{', trl/'.join(METHODS)}; got {ctx.run.method}")
        if stages.is_stage(ctx):
            return stages.command(ctx, latest_checkpoint, ctx.workspace_dir)
        pool = inputs.single_pool(ctx)
        if pool.nodes > 1:
            raise PrecheckError(f"{ctx.run.method} runs on one node; the profile asks for {pool.nodes} (use <= 8 GPUs)")
        model = inputs.model(ctx, required=True)
        train = inputs.train_data(ctx, required=True)
        validation = inputs.validation_data(ctx)
        config = inputs.flat_config(ctx.run.config)
        inputs.refuse_owned(config, OWNED, ctx.run.method)
        if method == "grpo" and not (config.get("reward_funcs") or config.get("reward_model_name_or_path")):
            raise PrecheckError(
                "trl/grpo needs a reward: set reward_funcs (e.g. -s reward_funcs=accuracy_reward) "
                "or reward_model_name_or_path in config.yaml"
            )
        if shutil.which("trl", path=ctx.environ.get("PATH")) is None:
            raise PrecheckError("`trl` is not on PATH in this image; trl/* methods need TRL (pip install trl)")
        dataset, has_test = _dataset_folder(ctx, train, validation)
        checkpoints = inputs.out_dir(ctx) / "checkpoints"
        argv = ["trl", method]
        if pool.gpus > 1:
            argv += ["--num_processes", str(pool.gpus)]
        argv += ["--model_name_or_path", model, "--dataset_name", dataset, "--dataset_train_split", "train"]
        if has_test:
            argv += ["--dataset_test_split", "test"]
        argv += ["--output_dir", str(checkpoints), "--logging_strategy", "steps"]
        start_step = 0
        resume = latest_checkpoint(checkpoints) if inputs.resuming(ctx) else None
        if resume is not None:
            argv += ["--resume_from_checkpoint", str(resume[0])]
            start_step = resume[1]
        for key, value in config.items():
            words = _flag_values(value)
            if words is not None:
                argv += [f"--{key}", *words]
        logging_steps = config.get("logging_steps", DEFAULT_LOGGING_STEPS)
        return CommandSpec(
            argv=argv,
            cwd=ctx.workspace_dir,
            name=f"trl {method}",
            display=f"trl {method} ({ctx.run.method})",
            metrics=HfTrainerLogParser(int(logging_steps), start_step),
        )
