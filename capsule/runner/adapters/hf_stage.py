"""The built-in export and eval stages of the catalog methods, run with the image's Python.

The runner never imports this module: the adapters copy its source into the attempt's scratch
directory and run it as ``python <scratch>/hf_stage.py export|eval ...`` in the training image,
where torch and transformers are (peft too when LoRA adapters are merged).

    export --checkpoint DIR --base-model M --out DIR
        Load the checkpoint (a Hugging Face model directory, or LoRA adapters on top of
        --base-model, which are merged), save it as a Hugging Face model in --out (safetensors +
        tokenizer), and load it back to prove it loads.
    eval --model DIR --data FILE [--max-length N]
        Mean next-token loss and perplexity of the model on the validation data, printed as one
        HF-Trainer-style dict line ({'eval_loss': ...}) that the runner reports as metrics.

Rows are read by shape: ``text``; ``messages``; ``prompt`` + ``completion``; ``prompt`` +
``chosen`` (preference pairs: the preferred answer); ``prompt`` alone (RL prompts). Strings or
chat message lists.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import shutil
import sys
from typing import Any

TEXT_KEYS = (("text",), ("messages",), ("prompt", "completion"), ("prompt", "chosen"), ("chosen",), ("prompt",))
DATA_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv", ".arrow": "arrow"}


def fail(message: str) -> None:
    print(f"starforge: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)


# -- export ---------------------------------------------------------------------------------------


def load_for_export(checkpoint: pathlib.Path, base_model: str) -> Any:
    from transformers import AutoModelForCausalLM

    if (checkpoint / "adapter_config.json").is_file():
        try:
            from peft import PeftModel  # type: ignore[import-not-found, unused-ignore]
        except ImportError:
            fail(f"{checkpoint} holds LoRA adapters; merging them needs peft in the image (pip install peft)")
        base = AutoModelForCausalLM.from_pretrained(base_model or _adapter_base(checkpoint))
        return PeftModel.from_pretrained(base, str(checkpoint)).merge_and_unload()
    return AutoModelForCausalLM.from_pretrained(str(checkpoint))


def _adapter_base(checkpoint: pathlib.Path) -> str:
    config = json.loads((checkpoint / "adapter_config.json").read_text())
    return str(config.get("base_model_name_or_path") or "")


def load_tokenizer(*candidates: str) -> Any:
    from transformers import AutoTokenizer

    errors = []
    for where in candidates:
        if not where:
            continue
        try:
            return AutoTokenizer.from_pretrained(where)
        except (OSError, ValueError) as exc:
            errors.append(f"{where}: {exc}")
    fail("no tokenizer found (" + "; ".join(errors) + ")")


def export(args: argparse.Namespace) -> None:
    checkpoint = pathlib.Path(args.checkpoint)
    out = pathlib.Path(args.out)
    model = load_for_export(checkpoint, args.base_model)
    tokenizer = load_tokenizer(str(checkpoint), args.base_model)
    # Written beside the target and renamed, so that a retried export never leaves half a model.
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(str(partial), safe_serialization=True)
    tokenizer.save_pretrained(str(partial))
    shutil.rmtree(out, ignore_errors=True)
    os.replace(partial, out)
    from transformers import AutoModelForCausalLM

    reloaded = AutoModelForCausalLM.from_pretrained(str(out))
    params = sum(p.numel() for p in reloaded.parameters())
    print(f"starforge: exported {checkpoint} to {out} ({params} parameters, loads with transformers)", flush=True)


# -- eval -----------------------------------------------------------------------------------------


def read_rows(path: str) -> list[dict[str, Any]]:
    from datasets import load_dataset  # type: ignore[import-untyped, unused-ignore]

    source = pathlib.Path(path)
    if source.is_dir():
        found = sorted(p for p in source.iterdir() if p.name.split(".")[0] in ("test", "validation"))
        if not found:
            fail(f"{path} is a folder without a test.<ext> or validation.<ext> file")
        source = found[0]
    kind = DATA_FORMATS.get(source.suffix.lower())
    if kind is None:
        fail(f"{source}: eval reads {', '.join(DATA_FORMATS)} files")
    return [dict(row) for row in load_dataset(kind, data_files=str(source), split="train")]


def as_text(value: Any, tokenizer: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(m, dict) for m in value):
        if getattr(tokenizer, "chat_template", None):
            return str(tokenizer.apply_chat_template(value, tokenize=False))
        return "\n".join(str(m.get("content", "")) for m in value)
    return ""


def row_text(row: dict[str, Any], tokenizer: Any) -> str:
    for keys in TEXT_KEYS:
        if all(row.get(k) for k in keys):
            return "".join(as_text(row[k], tokenizer) for k in keys)
    return ""


def evaluate(args: argparse.Namespace) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(args.model)
    model.eval()  # type: ignore[no-untyped-call, unused-ignore]
    tokenizer = load_tokenizer(args.model, args.tokenizer)
    texts = [t for t in (row_text(r, tokenizer) for r in read_rows(args.data)) if t]
    if not texts:
        fail(f"{args.data}: no row has text, messages, prompt/completion or prompt/chosen")
    total_loss, total_tokens = 0.0, 0
    with torch.no_grad():
        for text in texts:
            ids = tokenizer(text, return_tensors="pt", truncation=True, max_length=args.max_length)["input_ids"]
            predicted = int(ids.shape[1]) - 1
            if predicted < 1:
                continue
            loss = float(model(input_ids=ids, labels=ids).loss)
            total_loss += loss * predicted
            total_tokens += predicted
    if total_tokens == 0:
        fail(f"{args.data}: every row is shorter than two tokens")
    mean = total_loss / total_tokens
    metrics = {
        "eval_loss": round(mean, 6),
        "eval_perplexity": round(math.exp(min(mean, 50.0)), 6),
        "eval_samples": len(texts),
        "eval_tokens": total_tokens,
    }
    print(repr(metrics), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="hf_stage.py")
    sub = parser.add_subparsers(dest="stage", required=True)
    ex = sub.add_parser("export")
    ex.add_argument("--checkpoint", required=True)
    ex.add_argument("--base-model", default="")
    ex.add_argument("--out", required=True)
    ev = sub.add_parser("eval")
    ev.add_argument("--model", required=True)
    ev.add_argument("--data", required=True)
    ev.add_argument("--tokenizer", default="", help="when the model folder has none (NeMo-RL keeps it beside)")
    ev.add_argument("--max-length", type=int, default=1024)
    args = parser.parse_args(argv)
    export(args) if args.stage == "export" else evaluate(args)


if __name__ == "__main__":
    main()
