"""The runner's built-in export/eval script (capsule/runner/adapters/hf_stage.py), run as the
stage jobs run it: a separate Python process with transformers (and peft for LoRA), on the tiny
LLaMA of tools/tiny_model.py. LoRA adapters are merged into the base model, so the export loads
with plain transformers."""

from __future__ import annotations

import ast
import json
import pathlib
import subprocess
import sys

import pytest

from capsule.runner.adapters import hf_stage
from tools import tiny_model

SCRIPT = pathlib.Path(hf_stage.__file__)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600, check=False
    )


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return tiny_model.build(tmp_path_factory.mktemp("tiny") / "model", tiny_model.corpus())


def test_lora_adapters_are_merged_into_a_plain_model(tiny: pathlib.Path, tmp_path: pathlib.Path) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny)
    peft_model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():  # a non-zero update, as training would leave
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.fill_(0.05)
    checkpoint = tmp_path / "checkpoint-7"
    peft_model.save_pretrained(str(checkpoint))
    out = tmp_path / "export"

    r = _run("export", "--checkpoint", str(checkpoint), "--base-model", str(tiny), "--out", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"exported {checkpoint} to {out}" in r.stdout
    assert not (out / "adapter_config.json").exists()  # a plain model, not adapters
    assert (out / "tokenizer.json").is_file()  # from --base-model, the checkpoint has none

    merged = AutoModelForCausalLM.from_pretrained(out).state_dict()
    original = AutoModelForCausalLM.from_pretrained(tiny).state_dict()
    assert merged.keys() == original.keys()
    changed = [k for k in merged if not torch.equal(merged[k], original[k])]
    assert changed and all("q_proj" in k or "v_proj" in k for k in changed)


def test_eval_prints_one_metrics_line(tiny: pathlib.Path, tmp_path: pathlib.Path) -> None:
    data = tmp_path / "val.jsonl"
    rows = [
        {"text": "the cat reads a book on day 1."},
        {"messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "a dog sings"}]},
        {"prompt": "the bird", "chosen": " paints the map.", "rejected": ".map the paints"},
        {"unrelated": 1},
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = _run("eval", "--model", str(tiny), "--data", str(data))
    assert r.returncode == 0, r.stderr[-3000:]
    (line,) = [ln for ln in r.stdout.splitlines() if ln.startswith("{'eval_loss'")]
    metrics = ast.literal_eval(line)
    assert metrics["eval_samples"] == 3  # the row without text is skipped
    assert 0 < metrics["eval_loss"] < 20
    assert metrics["eval_tokens"] > 10


def test_eval_refuses_data_without_text(tiny: pathlib.Path, tmp_path: pathlib.Path) -> None:
    data = tmp_path / "val.jsonl"
    data.write_text(json.dumps({"x": 1}) + "\n")
    r = _run("eval", "--model", str(tiny), "--data", str(data))
    assert r.returncode == 2
    assert "no row has text, messages, prompt/completion or prompt/chosen" in r.stderr
