"""trl/*: capsule.json run -> the exact `trl <method>` command line."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from capsule.runner.errors import PrecheckError
from tests.unit.recipes.helpers import Job, pool

SFT_DEFAULT_FLAGS = [
    "--num_train_epochs", "3.0", "--max_steps", "4", "--per_device_train_batch_size", "8",
    "--gradient_accumulation_steps", "1", "--lr_scheduler_type", "linear", "--warmup_steps", "0.0",
    "--weight_decay", "0.0", "--max_grad_norm", "1.0", "--seed", "42", "--bf16", "false",
    "--gradient_checkpointing", "true", "--dtype", "float32", "--max_length", "1024", "--packing", "false",
    "--dataset_text_field", "text", "--assistant_only_loss", "false", "--loss_type", "nll",
    "--use_peft", "false", "--lora_r", "16", "--lora_alpha", "32", "--lora_dropout", "0.05",
    "--lora_target_modules", "q_proj", "v_proj", "--logging_steps", "1", "--save_steps", "500",
    "--save_total_limit", "3", "--eval_strategy", "no", "--eval_steps", "500", "--report_to", "none",
]  # fmt: skip


@pytest.fixture
def job(tmp_path: pathlib.Path) -> Job:
    j = Job(tmp_path)
    j.tool("trl")
    j.file("data/train.jsonl")
    j.file("data/val.jsonl")
    j.file("models/tiny/config.json")
    return j


def test_sft_on_eight_gpus_with_validation_data_and_overrides(job: Job) -> None:
    command = job.command(
        "trl/sft",
        config={"max_steps": 4, "logging_steps": 1, "bf16": False},
        overrides=["learning_rate=1e-4", "lora_target_modules=q_proj,v_proj"],
        model="models/tiny",
        train_data="data/train.jsonl",
        validation_data="./data/val.jsonl",
        pools=[pool("main", "h100", 1, 8)],
    )
    assert job.rel(command.argv) == [
        "trl", "sft", "--num_processes", "8",
        "--model_name_or_path", "<ws>/models/tiny",
        "--dataset_name", "<scratch>/trl-dataset", "--dataset_train_split", "train", "--dataset_test_split", "test",
        "--output_dir", "<out>/checkpoints", "--logging_strategy", "steps",
        "--learning_rate", "0.0001", *SFT_DEFAULT_FLAGS,
    ]  # fmt: skip
    assert command.cwd == job.workspace
    assert (command.name, command.display) == ("trl sft", "trl sft (trl/sft)")
    # load_dataset reads a folder with one file per split; the links point at the lab's files.
    links = sorted(p.name for p in (job.scratch / "trl-dataset").iterdir())
    assert links == ["test.jsonl", "train.jsonl"]
    assert (job.scratch / "trl-dataset" / "train.jsonl").resolve() == job.workspace / "data" / "train.jsonl"


def test_one_gpu_or_cpu_runs_without_num_processes_and_hub_models_pass_through(job: Job) -> None:
    for series, gpus in (("h100", 1), ("cpu", 0)):
        command = job.command(
            "trl/kto",
            model="Qwen/Qwen3.5-9B",
            train_data="data/train.jsonl",
            pools=[pool("main", series, 1, gpus)],
        )
        assert command.argv[:4] == ["trl", "kto", "--model_name_or_path", "Qwen/Qwen3.5-9B"]
        assert "--num_processes" not in command.argv
        assert "--dataset_test_split" not in command.argv
        assert job.rel(command.argv[command.argv.index("--beta") : command.argv.index("--beta") + 8]) == [
            "--beta", "0.1", "--desirable_weight", "1.0", "--undesirable_weight", "1.0", "--loss_type", "kto",
        ]  # fmt: skip


def test_resume_takes_the_latest_checkpoint_and_counts_steps_from_it(job: Job) -> None:
    for step in (2, 10, 6):
        (job.out / "checkpoints" / f"checkpoint-{step}").mkdir(parents=True)
        (job.out / "checkpoints" / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    (job.out / "checkpoints" / "checkpoint-99.tmp").mkdir()
    (job.out / "checkpoints" / "checkpoint-12").mkdir()  # cut short by a pause: no trainer_state.json
    args: dict[str, Any] = {"model": "models/tiny", "train_data": "data/train.jsonl", "config": {"logging_steps": 5}}
    fresh = job.command("trl/dpo", **args)
    assert "--resume_from_checkpoint" not in fresh.argv
    resumed = job.command("trl/dpo", FORGE_RESUME="1", **args)
    at = resumed.argv.index("--resume_from_checkpoint")
    assert job.rel(resumed.argv[at : at + 2]) == ["--resume_from_checkpoint", "<out>/checkpoints/checkpoint-10"]
    assert resumed.metrics is not None
    assert resumed.metrics.feed("{'loss': '0.69', 'epoch': '1.0'}") == [(15, "loss", 0.69), (15, "epoch", 1.0)]


def test_grpo_needs_a_reward_and_passes_reward_funcs_as_a_list(job: Job) -> None:
    base: dict[str, Any] = {"model": "models/tiny", "train_data": "data/train.jsonl"}
    with pytest.raises(PrecheckError, match="trl/grpo needs a reward: set reward_funcs"):
        job.command("trl/grpo", **base)
    command = job.command(
        "trl/grpo", overrides=["reward_funcs=accuracy_reward,think_format_reward", "beta=0.04"], **base
    )
    at = command.argv.index("--reward_funcs")
    assert command.argv[at : at + 3] == ["--reward_funcs", "accuracy_reward", "think_format_reward"]
    assert command.argv[command.argv.index("--beta") + 1] == "0.04"
    assert "--reward_model_name_or_path" not in command.argv  # empty string: TRL's default


def test_prechecks_name_the_missing_input(job: Job) -> None:
    cases: list[tuple[dict[str, Any], str | None]] = [
        ({"train_data": "data/train.jsonl"}, "trl/sft needs a model: submit with --model"),
        ({"model": "models/tiny"}, "trl/sft needs training data: submit with --train-data"),
        ({"model": "m", "train_data": "data/nope.jsonl"}, r"--train-data data/nope.jsonl: not found in the packed lab"),
        ({"model": "m", "train_data": "../etc/passwd"}, "must be a relative path"),
        ({"model": "m", "train_data": "data"}, None),  # a dataset folder is fine
        ({"model": "m", "train_data": "data", "validation_data": "data/val.jsonl"}, "put the validation split in it"),
        ({"model": "m", "train_data": "data/train.jsonl", "pools": [pool("main", "h100", 2, 8)]}, "runs on one node"),
        (
            {"model": "m", "train_data": "data/train.jsonl", "config": {"output_dir": "/x"}},
            "'output_dir' is not a parameter of trl/sft",  # the server refuses it first
        ),
    ]
    for kwargs, message in cases:
        if message is None:
            job.command("trl/sft", **kwargs)
            continue
        with pytest.raises(Exception, match=message):
            job.command("trl/sft", **kwargs)
    job.file("data/train.xlsx")
    with pytest.raises(PrecheckError, match=r"TRL reads .*got \.xlsx"):
        job.command("trl/sft", model="m", train_data="data/train.xlsx")
    (job.bin / "trl").unlink()
    with pytest.raises(PrecheckError, match="`trl` is not on PATH"):
        job.command("trl/sft", model="m", train_data="data/train.jsonl")
    del job.environ["FORGE_OUT_DIR"]
    job.tool("trl")
    with pytest.raises(PrecheckError, match="FORGE_OUT_DIR is not set"):
        job.command("trl/sft", model="m", train_data="data/train.jsonl")


def test_train_data_inside_a_mounted_dataset(job: Job, tmp_path: pathlib.Path) -> None:
    mounted = tmp_path / "datasets" / "train"
    (mounted / "splits").mkdir(parents=True)
    (mounted / "splits" / "train.parquet").write_text("x")
    command = job.command("trl/sft", model="m", train_data="splits/train.parquet", TRAIN_DATA_DIR=str(mounted))
    assert (job.scratch / "trl-dataset" / "train.parquet").resolve() == mounted / "splits" / "train.parquet"
    assert "--dataset_name" in command.argv
