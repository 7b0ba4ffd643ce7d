"""trl/dpo, trl/kto and trl/grpo for real on CPU, end to end through `sf`, a real console and the
local executor, with the tiny LLaMA of tools/tiny_model.py and data made here.

Each method trains a few steps with TRL's own CLI; its metrics reach the console and its
checkpoints land in FORGE_OUT_DIR. trl/dpo is also paused after its first checkpoint and resumed:
the second attempt continues from that checkpoint (--resume_from_checkpoint, step numbers carry on).
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest
from sqlalchemy import func, select
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.job.v1 import job_state_pb2 as st

from control import embedded
from control.db import models as m
from tests.integration.console import REPO, console, git
from tools import tiny_model

STEPS = 3
BASE = {
    "image": "host",  # the embedded process-runtime fleet runs jobs on this machine's own Python
    "max_steps": STEPS,
    "logging_steps": 1,
    "save_steps": 2,
    "per_device_train_batch_size": 4,
    "learning_rate": 1e-3,
    "bf16": False,
    "gradient_checkpointing": False,
}


def _pairs() -> list[dict[str, str]]:
    """Preference pairs: the sentence's own ending is chosen, the same words reversed rejected."""
    out = []
    for text in tiny_model.corpus():
        words = text.split()
        rest = words[2:]
        out.append(
            {"prompt": " ".join(words[:2]), "chosen": " " + " ".join(rest), "rejected": " " + " ".join(rest[::-1])}
        )
    return out


def _kto_rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for p in _pairs():
        rows.append({"prompt": p["prompt"], "completion": p["chosen"], "label": True})
        rows.append({"prompt": p["prompt"], "completion": p["rejected"], "label": False})
    return rows


DATA: dict[str, Callable[[], list[dict[str, Any]]]] = {
    "dpo": _pairs,
    "kto": _kto_rows,
    # conversational prompts: TRL's format rewards read completions as chat messages
    "grpo": lambda: [{"prompt": [{"role": "user", "content": p["prompt"]}]} for p in _pairs()],
}
CONFIG: dict[str, dict[str, Any]] = {
    "dpo": {"max_length": 64},
    "kto": {"max_length": 64},
    # think_format_reward is one of TRL's built-in reward functions: it needs no answer column.
    "grpo": {"reward_funcs": ["think_format_reward"], "num_generations": 2, "max_completion_length": 8},
}
# A metric each method's trainer logs every step.
METRIC = {"kto": "loss", "grpo": "reward"}


@pytest.fixture(scope="module")
def capsule_built() -> None:
    """The runner inside the capsule must be built from these sources (a no-op when unchanged)."""
    subprocess.run([sys.executable, "-m", "capsule.build", "--out", str(embedded.CAPSULE_DIR)], check=True, cwd=REPO)


async def _submit(c, tmp_path: pathlib.Path, method: str, config: Mapping[str, Any]) -> str:  # type: ignore[no-untyped-def]
    rows: Sequence[Mapping[str, Any]] = DATA[method]()
    lab = await c.lab(
        method,
        method=f"trl/{method}",
        config={**BASE, **CONFIG[method], **config},
        files={"data/train.jsonl": "".join(json.dumps(r) + "\n" for r in rows)},
    )
    tiny_model.build(lab / "models" / "tiny", tiny_model.corpus())
    git(lab, "add", "-A")
    git(lab, "commit", "-qm", "tiny model")
    r = await c.sf_async(
        "-o", "json", "submit", method,
        "--model", "models/tiny",
        "--train-data", "data/train.jsonl",
        "--profile", "cpu",
        "--env", "HF_HUB_OFFLINE=1",
        "--env", f"HF_HOME={tmp_path / 'hf-home'}",
        cwd=lab,
    )  # fmt: skip
    return str(json.loads(r.stdout)["job"]["job_id"])


async def _steps(c, job_id: str, name: str) -> list[int]:  # type: ignore[no-untyped-def]
    m_ = await c.sf_async("-o", "json", "job", "metrics", job_id, "--name", name, "--points")
    series = json.loads(m_.stdout)["series"]
    return [int(p["step"]) for s in series for p in s["data"]]


@pytest.mark.timeout(900)
@pytest.mark.usefixtures("venv_on_path", "capsule_built")
@pytest.mark.parametrize("method", ["kto", "grpo"])
async def test_trl_method_trains_a_tiny_model_on_cpu(tmp_path: pathlib.Path, method: str) -> None:
    async with console(tmp_path) as c:
        job_id = await _submit(c, tmp_path, method, {})
        job = await c.wait(job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=600)
        logs = "\n".join(await c.logs(job_id))
        assert job.state == st.JOB_STATE_SUCCEEDED, logs[-6000:]
        assert f"starforge: running trl {method} (trl/{method})" in logs
        assert await _steps(c, job_id, METRIC[method]) == list(range(1, STEPS + 1))
        checkpoints = pathlib.Path(job.out_dir) / "checkpoints"
        assert sorted(p.name for p in checkpoints.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-3"]
        assert (checkpoints / "checkpoint-3" / "model.safetensors").is_file()


@pytest.mark.timeout(900)
@pytest.mark.usefixtures("venv_on_path", "capsule_built")
async def test_trl_dpo_pauses_and_resumes_from_its_checkpoint(tmp_path: pathlib.Path) -> None:
    # A tiny model trains at ~50 steps/s on a fast machine: enough steps that the pause, sent as
    # soon as the first checkpoint is complete, lands well before the last step.
    total = 240
    async with console(tmp_path) as c:
        job_id = await _submit(c, tmp_path, "dpo", {"max_steps": total, "save_steps": 16})
        running = await c.wait(job_id, st.JOB_STATE_RUNNING, st.JOB_STATE_FAILED, timeout=120)
        checkpoints = pathlib.Path(running.out_dir) / "checkpoints"
        deadline = time.monotonic() + 480
        asked = time.monotonic()
        # the first complete checkpoint, whichever step it is (the file system is polled, not the
        # console: one round of RPCs took longer than a dozen training steps)
        while not any(checkpoints.glob("checkpoint-*/trainer_state.json")):
            if time.monotonic() - asked > 0.5:
                job = await c.get(job_id)
                assert job.state == st.JOB_STATE_RUNNING, "\n".join((await c.logs(job_id))[-60:])
                assert time.monotonic() < deadline, "no checkpoint yet:\n" + "\n".join((await c.logs(job_id))[-60:])
                asked = time.monotonic()
            await asyncio.sleep(0.02)

        await c.jobs.PauseJob(ctl.PauseJobRequest(job_id=job_id), metadata=c.md)
        await c.wait(job_id, st.JOB_STATE_PAUSED, timeout=120)
        # a pause that lands while a checkpoint is being saved leaves it without trainer_state.json
        # (written last); the adapter skips such a one, so only complete checkpoints count here
        kept = sorted(
            int(p.name.split("-")[1]) for p in checkpoints.glob("checkpoint-*") if (p / "trainer_state.json").is_file()
        )
        assert kept and kept[-1] < total, kept

        await c.jobs.ResumeJob(ctl.ResumeJobRequest(job_id=job_id), metadata=c.md)
        done = await c.wait(job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=600)
        lines = await c.logs(job_id)
        assert done.state == st.JOB_STATE_SUCCEEDED, "\n".join(lines[-80:])
        assert [a.number for a in done.attempts] == [1, 2]
        # the second attempt continued from the latest checkpoint the first one left: its first
        # step is the one after it, and it ran only the steps left (a restart from 0 would log
        # `total` more steps)
        first_step_2 = await c.app.ctx.db.run(
            lambda s: s.scalar(
                select(func.min(m.MetricChunk.first_step)).where(
                    m.MetricChunk.job_id == job_id, m.MetricChunk.attempt_number == 2
                )
            )
        )
        assert first_step_2 == kept[-1] + 1
        assert max(await _steps(c, job_id, "loss")) == total
        assert (checkpoints / f"checkpoint-{total}" / "model.safetensors").is_file()
