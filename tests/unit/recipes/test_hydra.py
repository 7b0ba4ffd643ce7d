"""The adapters' Hydra quoting, checked against Hydra's own override parser (the one verl's
main_ppo and NeMo-RL's run scripts use)."""

from __future__ import annotations

from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser

from capsule.runner.adapters import hydra

VALUES: list[Any] = [
    "it's", "C:\\dir\\", "x\\y", "1e-6", "true", "null", "a b", "a,b", "[x]", "~/data", "hdfs://x/y",
    "/abs/p-1_2.parquet", "q\\'q", "Qwen/Qwen3.5-9B", "8", "1.", ".5", "nan", "x=y", '"dq"', "tab\tx", "a'\\",
    "{k}", "-", "+x", "token-mean", 1, -3, 0, 0.05, 1e-6, 2.0e-05, 1e20, True, False, None,
    ["console", "wandb"], [], ["a b", "1", "it's"], {"k": 1, "b": "c d"},
]  # fmt: skip


def test_every_value_round_trips_through_hydras_parser() -> None:
    parser = OverridesParser.create()
    for value in VALUES:
        text = hydra.override("k", value)
        parsed = parser.parse_override(text)
        got = parsed.value()
        assert got == value and type(got) is type(value), (value, text, got)


def test_interpolations_are_escaped_literals() -> None:
    text = hydra.override("k", "${oc.env:HOME}")
    assert text == "k='\\${oc.env:HOME}'"  # OmegaConf reads "\${" as a literal "${"


def test_plain_values_stay_unquoted() -> None:
    assert hydra.override("trainer.logger", ["console"]) == "trainer.logger=[console]"
    assert hydra.override("data.train_files", "/w/data/train.parquet") == "data.train_files=/w/data/train.parquet"
    assert hydra.override("lr", 1e-6) == "lr=1e-06"
    assert hydra.override("flag", True) == "flag=True"
    assert hydra.override("name", "1e-6") == "name='1e-6'"
