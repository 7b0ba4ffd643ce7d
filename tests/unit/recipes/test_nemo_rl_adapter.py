"""nemo-rl/*: capsule.json run -> the exact `python examples/run_*.py --config ... key=value` command line."""

from __future__ import annotations

import pathlib

import pytest

from capsule.runner.errors import PrecheckError
from tests.unit.recipes.helpers import Job, pool


@pytest.fixture
def job(tmp_path: pathlib.Path) -> Job:
    j = Job(tmp_path)
    home = tmp_path / "nemo-rl"
    for rel in ("examples/run_grpo.py", "examples/run_sft.py", "examples/configs/grpo_math_1B.yaml"):
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text("")
    j.environ["NEMO_RL_HOME"] = str(home)
    return j


def test_grpo_seed_overrides_with_the_kl_alias(job: Job) -> None:
    command = job.command(
        "nemo-rl/grpo",
        overrides=["policy.optimizer.kwargs.lr=1e-6", "grpo.kl_coef=0.05"],
        pools=[pool("main", "h200", 2, 8)],
    )
    assert command.cwd == job.root / "nemo-rl"
    assert (command.name, command.display) == ("run_grpo.py", "python examples/run_grpo.py (nemo-rl/grpo)")
    assert job.rel(command.argv) == [
        "python", "examples/run_grpo.py", "--config", "examples/configs/grpo_math_1B.yaml",
        "cluster.num_nodes=2", "cluster.gpus_per_node=8",
        "checkpointing.checkpoint_dir=<out>/checkpoints", "logger.log_dir=<out>/logs",
        "grpo.num_prompts_per_step=32", "grpo.num_generations_per_prompt=16", "grpo.max_num_epochs=1",
        "grpo.max_num_steps=1000000", "grpo.normalize_rewards=True", "grpo.use_leave_one_out_baseline=True",
        "grpo.val_period=10", "grpo.val_at_start=False", "grpo.max_val_samples=256", "grpo.seed=42",
        "loss_fn.reference_policy_kl_penalty=0.05",
        "loss_fn.ratio_clip_min=0.2", "loss_fn.ratio_clip_max=0.2", "loss_fn.token_level_loss=True",
        "loss_fn.use_on_policy_kl_approximation=False", "loss_fn.use_importance_sampling_correction=False",
        "policy.model_name=Qwen/Qwen2.5-1.5B", "policy.train_global_batch_size=512",
        "policy.train_micro_batch_size=4", "policy.logprob_batch_size=4", "policy.max_total_sequence_length=512",
        "policy.precision=bfloat16", "policy.max_grad_norm=1.0", "policy.optimizer.kwargs.lr=1e-06",
        "policy.optimizer.kwargs.weight_decay=0.01", "policy.dtensor_cfg.tensor_parallel_size=1",
        "policy.dtensor_cfg.activation_checkpointing=False", "policy.dtensor_cfg.cpu_offload=False",
        "policy.generation.temperature=1.0", "policy.generation.vllm_cfg.tensor_parallel_size=1",
        "policy.generation.vllm_cfg.gpu_memory_utilization=0.6", "data.train.dataset_name=OpenMathInstruct-2",
        "data.shuffle=True", "checkpointing.enabled=True", "checkpointing.save_period=10",
        "checkpointing.keep_top_k=3", "logger.wandb_enabled=False", "logger.tensorboard_enabled=False",
    ]  # fmt: skip


def test_flags_and_lab_paths_become_absolute_config_values(job: Job) -> None:
    job.file("configs/sft_small.yaml")
    job.file("data/train.jsonl")
    job.file("data/val.jsonl")
    job.file("models/tiny/config.json")
    command = job.command(
        "nemo-rl/sft",
        config={"base_config": "configs/sft_small.yaml"},
        model="models/tiny",
        train_data="data/train.jsonl",
        validation_data="data/val.jsonl",
    )
    argv = job.rel(command.argv)
    assert argv[:11] == [
        "python", "examples/run_sft.py", "--config", "<ws>/configs/sft_small.yaml",
        "cluster.num_nodes=1", "cluster.gpus_per_node=1",
        "checkpointing.checkpoint_dir=<out>/checkpoints", "logger.log_dir=<out>/logs",
        "++data.train.data_path=<ws>/data/train.jsonl",
        "++data.validation.dataset_name=ResponseDataset", "++data.validation.data_path=<ws>/data/val.jsonl",
    ]  # fmt: skip
    assert "data.train.dataset_name=ResponseDataset" in argv
    assert "policy.model_name=<ws>/models/tiny" in argv
    assert "sft.max_num_steps=60" in argv
    assert not any(a.startswith("base_config") for a in argv)


def test_prechecks(job: Job, tmp_path: pathlib.Path) -> None:
    with pytest.raises(PrecheckError, match="needs GPUs"):
        job.command("nemo-rl/grpo", pools=[pool("main", "cpu", 1, 0)])
    with pytest.raises(PrecheckError, match=r"base_config examples/configs/sft.yaml: not in the NeMo-RL checkout"):
        job.command("nemo-rl/sft")
    job.environ["NEMO_RL_HOME"] = str(tmp_path / "elsewhere")
    with pytest.raises(PrecheckError, match=r"run_grpo.py not found.*set NEMO_RL_HOME"):
        job.command("nemo-rl/grpo")
