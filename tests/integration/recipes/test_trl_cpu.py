"""trl/sft for real on CPU, end to end through the real `sf`, console and local executor.

A 2-layer LLaMA with a tokenizer trained here (tools/tiny_model.py) and 64 sentences of jsonl are
committed into the lab; `sf submit` runs TRL's own `trl sft` through the trl adapter on the
process-runtime fleet (`image: host`, the venv's python and trl on PATH), offline. The loss the HF
Trainer prints reaches the platform's metrics, and the checkpoints land in the job's FORGE_OUT_DIR.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
from starforge_api.job.v1 import job_state_pb2 as st

from control import embedded
from tests.integration.console import REPO, console, git
from tools import tiny_model

STEPS = 4
CONFIG = {
    "image": "host",  # the embedded process-runtime fleet runs jobs on this machine's own Python
    "max_steps": STEPS,
    "logging_steps": 1,
    "save_steps": 2,
    "per_device_train_batch_size": 4,
    "max_length": 64,
    "bf16": False,
    "gradient_checkpointing": False,
}


@pytest.mark.timeout(600)
@pytest.mark.usefixtures("venv_on_path")
async def test_trl_sft_trains_a_tiny_model_on_cpu(tmp_path: pathlib.Path) -> None:
    # The runner inside the capsule must be built from these sources (a no-op when unchanged).
    subprocess.run([sys.executable, "-m", "capsule.build", "--out", str(embedded.CAPSULE_DIR)], check=True, cwd=REPO)
    async with console(tmp_path) as c:
        texts = tiny_model.corpus()
        lab = await c.lab(
            "sft",
            method="trl/sft",
            config=CONFIG,
            files={"data/train.jsonl": "".join(json.dumps({"text": t}) + "\n" for t in texts)},
        )
        tiny_model.build(lab / "models" / "tiny", texts)
        git(lab, "add", "-A")
        git(lab, "commit", "-qm", "tiny model")
        r = await c.sf_async(
            "-o", "json", "submit", "sft",
            "--model", "models/tiny",
            "--train-data", "data/train.jsonl",
            "--profile", "cpu",
            "-s", "learning_rate=1e-3",
            "--env", "HF_HUB_OFFLINE=1",
            "--env", f"HF_HOME={tmp_path / 'hf-home'}",
            cwd=lab,
        )  # fmt: skip
        job_id = json.loads(r.stdout)["job"]["job_id"]
        job = await c.wait(job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=420)
        logs = await c.logs(job_id)
        assert job.state == st.JOB_STATE_SUCCEEDED, "\n".join(logs[-80:])

        # TRL's own output, and the command line the adapter built
        text = "\n".join(logs)
        assert "starforge: running trl sft (trl/sft)" in text
        assert "Training completed" in text
        assert "'loss':" in text

        # the loss reached the platform, one point per optimizer step
        m = await c.sf_async("-o", "json", "job", "metrics", job_id, "--name", "loss", "--points")
        (series,) = json.loads(m.stdout)["series"]
        assert series["name"] == "loss"
        assert [int(p["step"]) for p in series["data"]] == list(range(1, STEPS + 1))
        assert all(0 < p["value"] < 20 for p in series["data"])
        every = json.loads((await c.sf_async("-o", "json", "job", "metrics", job_id)).stdout)["series"]
        names = {s["name"] for s in every}
        assert {"loss", "grad_norm", "learning_rate", "train_loss"} <= names

        # checkpoints in FORGE_OUT_DIR (the local executor's out/<job_id>)
        checkpoints = tmp_path / "executor" / "out" / job_id / "checkpoints"
        assert sorted(p.name for p in checkpoints.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
        assert (checkpoints / "checkpoint-4" / "model.safetensors").is_file()
        assert (checkpoints / "model.safetensors").is_file()  # trl sft saves the final model too
