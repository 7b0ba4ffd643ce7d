"""verl/*: capsule.json run -> the exact `python3 -m verl.trainer.main_ppo key=value ...` command line."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from capsule.runner.errors import PrecheckError
from tests.unit.recipes.helpers import Job, pool

OWNED_HEAD = [
    "python3", "-m", "verl.trainer.main_ppo", "algorithm.adv_estimator=grpo",
    "data.train_files=<ws>/data/train.parquet", "data.val_files=<ws>/data/val.parquet",
    "actor_rollout_ref.model.path=Qwen/Qwen3.5-9B",
]  # fmt: skip
GRPO_CONFIG = [
    "data.train_batch_size=1024", "data.max_prompt_length=512", "data.max_response_length=1024",
    "data.filter_overlong_prompts=True", "data.truncation=error", "data.prompt_key=prompt",
    "actor_rollout_ref.actor.optim.lr=1e-06", "actor_rollout_ref.actor.ppo_mini_batch_size=256",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8", "actor_rollout_ref.actor.use_dynamic_bsz=False",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=16384", "actor_rollout_ref.actor.ppo_epochs=1",
    "actor_rollout_ref.actor.clip_ratio=0.2", "actor_rollout_ref.actor.entropy_coeff=0.0",
    "actor_rollout_ref.actor.loss_agg_mode=token-mean", "actor_rollout_ref.actor.use_kl_loss=True",
    "actor_rollout_ref.actor.kl_loss_coef=0.05", "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
    "actor_rollout_ref.actor.fsdp_config.param_offload=False",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
    "actor_rollout_ref.model.enable_gradient_checkpointing=True", "actor_rollout_ref.model.use_remove_padding=True",
    "actor_rollout_ref.model.lora_rank=0", "actor_rollout_ref.model.lora_alpha=16",
    "actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.n=5", "actor_rollout_ref.rollout.temperature=1.0",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=2", "actor_rollout_ref.rollout.gpu_memory_utilization=0.6",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8", "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "algorithm.use_kl_in_reward=False", "algorithm.norm_adv_by_std_in_grpo=True",
    "custom_reward_function.path=<ws>/rewards/gsm8k.py", "custom_reward_function.name=compute_score",
    "trainer.total_epochs=15", "trainer.save_freq=20", "trainer.test_freq=5", "trainer.val_before_train=True",
    "trainer.critic_warmup=0", "trainer.project_name=starforge",
]  # fmt: skip


@pytest.fixture
def job(tmp_path: pathlib.Path) -> Job:
    j = Job(tmp_path)
    j.file("data/train.parquet")
    j.file("data/val.parquet")
    j.file("rewards/gsm8k.py")
    return j


def _grpo(job: Job, pools: list[dict[str, Any]], logger: str = "console,wandb") -> list[str]:
    command = job.command(
        "verl/grpo",
        overrides=[
            "actor_rollout_ref.actor.kl_loss_coef=0.05",
            f"trainer.logger={logger}",
            "custom_reward_function.path=rewards/gsm8k.py",
        ],
        model="Qwen/Qwen3.5-9B",
        train_data="data/train.parquet",
        validation_data="data/val.parquet",
        pools=pools,
        experiment="my-verl",
    )
    assert command.cwd == job.workspace
    return job.rel(command.argv)


TAIL = [
    "trainer.default_local_dir=<out>/checkpoints", "trainer.resume_mode=auto", "trainer.experiment_name=my-verl",
    "hydra.run.dir=<scratch>/hydra",
]  # fmt: skip


def test_grpo_on_one_pool_maps_it_to_the_trainer(job: Job) -> None:
    argv = _grpo(job, [pool("main", "h200", 2, 8)])
    assert argv == [
        *OWNED_HEAD, "trainer.nnodes=2", "trainer.n_gpus_per_node=8", *TAIL, *GRPO_CONFIG,
        "trainer.logger=[console,wandb]",
    ]  # fmt: skip


def test_grpo_with_a_rollout_pool_runs_standalone_rollout_replicas(job: Job) -> None:
    argv = _grpo(job, [pool("train", "h200", 1, 8), pool("rollout", "h100", 1, 2)], logger="wandb")
    assert argv == [
        *OWNED_HEAD, "trainer.nnodes=1", "trainer.n_gpus_per_node=8",
        "actor_rollout_ref.hybrid_engine=False",
        "actor_rollout_ref.rollout.nnodes=1", "actor_rollout_ref.rollout.n_gpus_per_node=2",
        "trainer.use_v1=True", "trainer.v1.trainer_mode=separate_async",
        *TAIL, *GRPO_CONFIG, "trainer.logger=[console,wandb]",  # console added: StarForge reads it
    ]  # fmt: skip


def test_ppo_uses_gae_and_a_critic_from_the_model_unless_configured(job: Job) -> None:
    base: dict[str, Any] = {
        "model": "Qwen/Qwen3.5-9B",
        "train_data": "data/train.parquet",
        "validation_data": "data/val.parquet",
    }
    argv = job.command("verl/ppo", pools=[pool("main", "h100", 1, 8)], **base).argv
    assert argv[3:8] == [
        "algorithm.adv_estimator=gae",
        f"data.train_files={job.workspace}/data/train.parquet",
        f"data.val_files={job.workspace}/data/val.parquet",
        "actor_rollout_ref.model.path=Qwen/Qwen3.5-9B",
        "critic.model.path=Qwen/Qwen3.5-9B",
    ]
    assert "algorithm.kl_ctrl.kl_coef=0.001" in argv and "critic.optim.lr=1e-05" in argv
    assert "custom_reward_function.path" not in " ".join(argv)  # empty: verl's scorers by data_source
    job.file("models/critic/config.json")
    argv = job.command("verl/ppo", overrides=["critic.model.path=models/critic"], **base).argv
    assert f"critic.model.path={job.workspace}/models/critic" in argv
    assert sum(a.startswith("critic.model.path=") for a in argv) == 1


def test_string_values_are_quoted_for_hydra(job: Job) -> None:
    job.file("data/my train.parquet")
    argv = job.command(
        "verl/grpo",
        overrides=["trainer.project_name=team a,b"],
        model="Qwen/Qwen3.5-9B",
        train_data="data/my train.parquet",
        validation_data="data/val.parquet",
    ).argv
    assert f"data.train_files='{job.workspace}/data/my train.parquet'" in argv
    assert "trainer.project_name='team a,b'" in argv


def test_prechecks(job: Job) -> None:
    base: dict[str, Any] = {"model": "m", "train_data": "data/train.parquet", "validation_data": "data/val.parquet"}
    with pytest.raises(PrecheckError, match=r"validates on data\.val_files: submit with --validation-data"):
        job.command("verl/grpo", model="m", train_data="data/train.parquet")
    with pytest.raises(PrecheckError, match="verl/grpo needs a model"):
        job.command("verl/grpo", train_data="data/train.parquet", validation_data="data/val.parquet")
    with pytest.raises(PrecheckError, match="needs GPUs; pool 'main' is cpu"):
        job.command("verl/grpo", pools=[pool("main", "cpu", 1, 0)], **base)
    with pytest.raises(PrecheckError, match="needs exactly 'train' and 'rollout'"):
        job.command("verl/grpo", pools=[pool("a", "h100", 1, 8), pool("b", "h100", 1, 8)], **base)
    with pytest.raises(PrecheckError, match=r"custom_reward_function.path=nope.py: not a file in the packed lab"):
        job.command("verl/grpo", overrides=["custom_reward_function.path=nope.py"], **base)
