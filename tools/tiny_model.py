"""A tiny causal LM made on this machine: a 2-layer LLaMA (hidden 32) and a byte-level BPE tokenizer
trained here with `tokenizers`. Nothing comes from a hub, so tests can train it with the real
frameworks (TRL) offline in seconds on a CPU.

    python -m tools.tiny_model OUT_DIR            # model + tokenizer via save_pretrained
    python -m tools.tiny_model OUT_DIR --data F   # also a jsonl dataset ({"text": ...}) at F

Needs the `ml` extra (torch, transformers, tokenizers).
"""

from __future__ import annotations

import argparse
import json
import pathlib
from collections.abc import Sequence

EOS = "<|endoftext|>"
PAD = "<|pad|>"
# Conversational data (TRL's "messages" format) needs a chat template; a minimal one is enough.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)
SUBJECTS = ("the cat", "a dog", "the bird", "my friend", "the robot", "a child", "the teacher", "our team")
VERBS = ("reads", "writes", "paints", "builds", "finds", "counts", "sings", "draws")
OBJECTS = ("a book", "the map", "two songs", "a small house", "the numbers", "a red kite", "the answer", "a letter")


def corpus(lines: int = 64) -> list[str]:
    """Deterministic simple sentences: enough structure for the loss to fall within a few steps."""
    out = []
    for i in range(lines):
        s, v, o = SUBJECTS[i % len(SUBJECTS)], VERBS[(i // 3) % len(VERBS)], OBJECTS[(i * 5) % len(OBJECTS)]
        out.append(f"{s} {v} {o} on day {i % 7}.")
    return out


def write_dataset(path: pathlib.Path, lines: Sequence[str]) -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"text": line}) + "\n" for line in lines))
    return path


def build(out_dir: pathlib.Path, texts: Sequence[str] | None = None, *, seed: int = 0) -> pathlib.Path:
    """Write config.json, model.safetensors and the tokenizer files into ``out_dir`` (~100 KB)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    texts = list(texts or corpus())
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=384, special_tokens=[EOS, PAD], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=bpe, eos_token=EOS, bos_token=EOS, pad_token=PAD
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("out_dir", type=pathlib.Path)
    parser.add_argument("--data", type=pathlib.Path, help="also write a jsonl dataset of the corpus here")
    args = parser.parse_args(argv)
    texts = corpus()
    build(args.out_dir, texts)
    if args.data is not None:
        write_dataset(args.data, texts)


if __name__ == "__main__":
    main()
