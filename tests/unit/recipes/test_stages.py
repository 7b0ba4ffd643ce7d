"""Pipeline stages of every catalog method: export and eval build their own commands (the
recipe's stage_commands, filled in by the adapter), never the training command again."""

from __future__ import annotations

import pathlib
import shutil

import pytest

from capsule.runner.adapters import stages
from capsule.runner.errors import PrecheckError
from tests.unit.recipes.helpers import CATALOG, Job, pool

CATALOG_METHODS = sorted(name for name, decl in CATALOG.recipes.items() if decl.adapter != "custom")
# What each framework's training leaves in FORGE_OUT_DIR/checkpoints (an older and the latest step).
CHECKPOINTS = {
    "trl": ["checkpoint-2", "checkpoint-10"],
    "verl": ["global_step_2/actor", "global_step_10/actor"],
    "nemo-rl": ["step_2/policy/weights", "step_10/policy/weights"],
}
LATEST = {"trl": "checkpoint-10", "verl": "global_step_10", "nemo-rl": "step_10"}


@pytest.fixture
def job(tmp_path: pathlib.Path) -> Job:
    j = Job(tmp_path)
    home = tmp_path / "nemo-rl"
    for rel in (
        "examples/run_grpo.py",
        "examples/run_sft.py",
        "examples/configs/grpo_math_1B.yaml",
        "examples/configs/sft.yaml",
        "examples/converters/convert_dcp_to_hf.py",
    ):
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text("")
    j.environ["NEMO_RL_HOME"] = str(home)
    j.tool("trl")
    return j


def _inputs(job: Job, method: str) -> dict[str, object]:
    framework = method.split("/", maxsplit=1)[0]
    for rel in CHECKPOINTS[framework]:
        (job.out / "checkpoints" / rel).mkdir(parents=True, exist_ok=True)
        if framework == "trl":  # the Trainer writes it last: a complete checkpoint
            (job.out / "checkpoints" / rel / "trainer_state.json").write_text("{}")
    (job.out / "export").mkdir(exist_ok=True)
    job.file("models/tiny/config.json")
    job.file("data/train.parquet")
    job.file("data/val.parquet")
    overrides = ["reward_funcs=accuracy_reward"] if method == "trl/grpo" else []
    gpus = 1 if framework == "trl" else 8
    return {
        "model": "models/tiny",
        "train_data": "data/train.parquet",
        "validation_data": "data/val.parquet",
        "overrides": overrides,
        "pools": [pool("main", "h100", 1, gpus)],
    }


@pytest.mark.parametrize("method", CATALOG_METHODS)
def test_each_stage_builds_its_own_command(job: Job, method: str) -> None:
    args = _inputs(job, method)
    train = job.command(method, **args)  # type: ignore[arg-type]
    commands = {"train": train.argv}
    for stage in ("export", "eval"):
        spec = job.command(method, stage=stage, **args)  # type: ignore[arg-type]
        commands[stage] = spec.argv
        assert spec.argv != train.argv
        assert spec.name == f"{stage} stage"
        joined = " ".join(job.rel(spec.argv))
        assert "{" not in joined, joined  # every placeholder filled in
    assert commands["export"] != commands["eval"]
    framework = method.split("/", maxsplit=1)[0]
    export = " ".join(job.rel(commands["export"]))
    assert f"<out>/checkpoints/{LATEST[framework]}" in export
    assert "<out>/export" in export
    assert "<ws>/data/val.parquet" in " ".join(job.rel(commands["eval"]))


def test_the_real_converters_are_named(job: Job) -> None:
    args = _inputs(job, "verl/grpo")
    export = job.rel(job.command("verl/grpo", stage="export", **args).argv)  # type: ignore[arg-type]
    assert export == [
        "python3", "-m", "verl.model_merger", "merge", "--backend", "fsdp",
        "--local_dir", "<out>/checkpoints/global_step_10/actor", "--target_dir", "<out>/export",
    ]  # fmt: skip
    args = _inputs(job, "nemo-rl/sft")
    spec = job.command("nemo-rl/sft", stage="export", **args)  # type: ignore[arg-type]
    assert spec.cwd == job.root / "nemo-rl"
    assert job.rel(spec.argv) == [
        "python", "examples/converters/convert_dcp_to_hf.py",
        "--config", "<out>/checkpoints/step_10/config.yaml",
        "--dcp-ckpt-path", "<out>/checkpoints/step_10/policy/weights", "--hf-ckpt-path", "<out>/export",
    ]  # fmt: skip
    args = _inputs(job, "trl/sft")
    spec = job.command("trl/sft", stage="export", **args)  # type: ignore[arg-type]
    assert job.rel(spec.argv) == [
        "python3", "<scratch>/hf_stage.py", "export", "--checkpoint", "<out>/checkpoints/checkpoint-10",
        "--base-model", "<ws>/models/tiny", "--out", "<out>/export",
    ]  # fmt: skip
    # the runner ships the stage script itself: the image only needs transformers
    assert (job.scratch / "hf_stage.py").read_text().startswith('"""The built-in export and eval stages')


def test_verl_export_follows_its_latest_file(job: Job) -> None:
    args = _inputs(job, "verl/ppo")
    (job.out / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("2\n")
    export = job.rel(job.command("verl/ppo", stage="export", **args).argv)  # type: ignore[arg-type]
    assert "<out>/checkpoints/global_step_2/actor" in export


def test_stage_prechecks(job: Job) -> None:
    args = _inputs(job, "trl/sft")
    for child in (job.out / "checkpoints").iterdir():
        shutil.rmtree(child)
    with pytest.raises(PrecheckError, match=r"export stage of trl/sft needs a checkpoint in FORGE_OUT_DIR/checkpoints"):
        job.command("trl/sft", stage="export", **args)  # type: ignore[arg-type]
    args["validation_data"] = ""
    with pytest.raises(PrecheckError, match="evaluates on the validation data: submit with --validation-data"):
        job.command("trl/sft", stage="eval", **args)  # type: ignore[arg-type]
    args["validation_data"] = "data/val.parquet"
    (job.out / "export").rmdir()
    with pytest.raises(PrecheckError, match="reads FORGE_OUT_DIR/export, which the export stage writes"):
        job.command("trl/sft", stage="eval", **args)  # type: ignore[arg-type]
    (job.root / "nemo-rl" / "examples" / "converters" / "convert_dcp_to_hf.py").unlink()
    args = _inputs(job, "nemo-rl/grpo")
    with pytest.raises(PrecheckError, match=r"runs examples/converters/convert_dcp_to_hf\.py, which is not in"):
        job.command("nemo-rl/grpo", stage="export", **args)  # type: ignore[arg-type]


def test_latest_numbered_ignores_files_and_strangers(tmp_path: pathlib.Path) -> None:
    for name in ("step_3", "step_12", "step_x", "other"):
        (tmp_path / name).mkdir()
    (tmp_path / "step_99").write_text("")
    assert stages.latest_numbered(tmp_path, __import__("re").compile(r"^step_(\d+)$")) == (tmp_path / "step_12", 12)
