"""`sf submit --then export --then eval` of trl/sft for real on CPU, end to end.

The tiny LLaMA of tools/tiny_model.py trains with TRL (as in test_trl_cpu.py); the export stage
turns its latest checkpoint into a Hugging Face model in FORGE_OUT_DIR/export with the runner's
built-in stage script, and the eval stage measures the exported model on --validation-data and
reports eval_loss / eval_perplexity through the runner's metric path. The test then loads the
exported model with transformers and checks the reported loss against its own computation.
"""

from __future__ import annotations

import json
import math
import pathlib
import subprocess
import sys

import pytest
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.job.v1 import job_pb2
from starforge_api.job.v1 import job_state_pb2 as st

from control import embedded
from tests.integration.console import REPO, console, git
from tests.integration.recipes.test_trl_cpu import CONFIG
from tools import tiny_model

VALIDATION_ROWS = 8


async def _chain(c, root: str) -> list[job_pb2.Job]:  # type: ignore[no-untyped-def]
    listed = await c.jobs.ListJobs(ctl.ListJobsRequest(page_size=100), metadata=c.md)
    chain = [j for j in listed.jobs if j.job_id == root]
    while nxt := [j for j in listed.jobs if j.parent_job_id == chain[-1].job_id]:
        chain += nxt
    return chain


def _loss_of(model_dir: pathlib.Path, texts: list[str]) -> float:
    """Token-weighted mean next-token loss, computed here independently of the stage script."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    total, tokens = 0.0, 0
    with torch.no_grad():
        for text in texts:
            ids = tokenizer(text, return_tensors="pt")["input_ids"]
            n = int(ids.shape[1]) - 1
            total += float(model(input_ids=ids, labels=ids).loss) * n
            tokens += n
    return total / tokens


def _weights(model_dir: pathlib.Path) -> dict[str, object]:
    from transformers import AutoModelForCausalLM

    return dict(AutoModelForCausalLM.from_pretrained(model_dir).state_dict())


def _same(a: dict[str, object], b: dict[str, object]) -> bool:
    import torch

    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # type: ignore[arg-type]


@pytest.mark.timeout(900)
@pytest.mark.usefixtures("venv_on_path")
async def test_trl_sft_export_and_eval_on_cpu(tmp_path: pathlib.Path) -> None:
    subprocess.run([sys.executable, "-m", "capsule.build", "--out", str(embedded.CAPSULE_DIR)], check=True, cwd=REPO)
    async with console(tmp_path) as c:
        texts = tiny_model.corpus()
        validation = tiny_model.corpus(72)[-VALIDATION_ROWS:]
        lab = await c.lab(
            "sft",
            method="trl/sft",
            config=CONFIG,
            files={
                "data/train.jsonl": "".join(json.dumps({"text": t}) + "\n" for t in texts),
                "data/val.jsonl": "".join(json.dumps({"text": t}) + "\n" for t in validation),
            },
        )
        tiny_model.build(lab / "models" / "tiny", texts)
        git(lab, "add", "-A")
        git(lab, "commit", "-qm", "tiny model")
        r = await c.sf_async(
            "-o", "json", "submit", "sft",
            "--model", "models/tiny",
            "--train-data", "data/train.jsonl",
            "--validation-data", "data/val.jsonl",
            "--profile", "cpu",
            "--then", "export", "--then", "eval",
            "--env", "HF_HUB_OFFLINE=1",
            "--env", f"HF_HOME={tmp_path / 'hf-home'}",
            cwd=lab,
        )  # fmt: skip
        out = json.loads(r.stdout)
        train, export, evaluation = await _chain(c, (out.get("job") or out)["job_id"])
        assert [j.stage for j in (train, export, evaluation)] == ["", "export", "eval"]
        for j in (train, export, evaluation):
            done = await c.wait(
                j.job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, st.JOB_STATE_STOPPED, timeout=480
            )
            assert done.state == st.JOB_STATE_SUCCEEDED, (done.stage, done.diagnosis, (await c.logs(j.job_id))[-60:])

        # export: its own command (not `trl sft` again), from the latest checkpoint
        export_logs = "\n".join(await c.logs(export.job_id))
        assert "starforge: running the export stage of trl/sft" in export_logs
        assert "trl sft" not in export_logs
        out_dir = tmp_path / "executor" / "out" / train.job_id
        assert f"exported {out_dir / 'checkpoints' / 'checkpoint-4'} to {out_dir / 'export'}" in export_logs

        # the exported model is a Hugging Face model that loads with transformers, with the trained
        # weights of the latest checkpoint (not the untrained tiny model's)
        exported = out_dir / "export"
        assert (exported / "model.safetensors").is_file()
        weights = _weights(exported)
        assert _same(weights, _weights(out_dir / "checkpoints" / "checkpoint-4"))
        assert not _same(weights, _weights(lab / "models" / "tiny"))
        loss = _loss_of(exported, validation)

        # eval: the metrics reached the platform, and they are the exported model's
        m = await c.sf_async("-o", "json", "job", "metrics", evaluation.job_id, "--points")
        series = {s["name"]: s["data"] for s in json.loads(m.stdout)["series"]}
        assert {"eval_loss", "eval_perplexity", "eval_samples", "eval_tokens"} <= set(series)
        (point,) = series["eval_loss"]
        assert int(point["step"]) == 4  # the trained step the export came from
        assert math.isclose(point["value"], loss, rel_tol=1e-3)
        assert series["eval_samples"][0]["value"] == VALIDATION_ROWS
        assert math.isclose(series["eval_perplexity"][0]["value"], math.exp(loss), rel_tol=1e-3)
