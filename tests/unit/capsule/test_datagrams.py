"""The SDK's datagram format, and the runner's parsing of it (no sockets: the encoders are pure)."""

from __future__ import annotations

import importlib.util
import json
import math
import pathlib
import sys
from types import ModuleType

import pytest

from capsule.runner.datagrams import DatagramParser

SDK_PATH = pathlib.Path(__file__).resolve().parents[3] / "capsule" / "sdk" / "starforge" / "__init__.py"


@pytest.fixture
def sdk() -> ModuleType:
    """A fresh copy of the SDK module (its step counter is per process)."""
    spec = importlib.util.spec_from_file_location("starforge_sdk_under_test", SDK_PATH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_metrics_datagram_format(sdk: ModuleType) -> None:
    [data] = sdk._encode_metrics(7, 1700000000.5, {"loss": 0.25, "acc": 1})
    assert json.loads(data) == {
        "v": 1,
        "kind": "metrics",
        "step": 7,
        "time": 1700000000.5,
        "scalars": {"loss": 0.25, "acc": 1},
    }
    parsed = DatagramParser().parse(data)
    assert [(p.step, p.name, p.value) for p in parsed.points] == [(7, "loss", 0.25), (7, "acc", 1.0)]
    time = parsed.points[0].time
    assert time is not None
    assert time.timestamp() == 1700000000.5
    assert parsed.warnings == []


def test_sample_datagram_format(sdk: ModuleType) -> None:
    data = sdk._encode_sample(3, 1.0, "2+2=", "4", 1.0, {"answer": "4", "meta": {"k": [1]}})
    assert json.loads(data) == {
        "v": 1,
        "kind": "sample",
        "step": 3,
        "time": 1.0,
        "prompt": "2+2=",
        "completion": "4",
        "reward": 1.0,
        "extra": {"answer": "4", "meta": '{"k": [1]}'},
    }
    [sample] = DatagramParser().parse(data).samples
    assert (sample.step, sample.prompt, sample.completion, sample.reward) == (3, "2+2=", "4", 1.0)
    assert sample.extra == {"answer": "4", "meta": '{"k": [1]}'}


def test_numpy_like_scalars_become_floats_and_nan_survives(sdk: ModuleType) -> None:
    class Scalar:
        def item(self) -> float:
            return 0.5

    class Floaty:
        def __float__(self) -> float:
            return 2.0

    [data] = sdk._encode_metrics(0, 0.0, {"a": Scalar(), "b": Floaty(), "c": math.nan})
    parsed = DatagramParser().parse(data)
    values = {p.name: p.value for p in parsed.points}
    assert values["a"] == 0.5
    assert values["b"] == 2.0
    assert math.isnan(values["c"])


def test_non_numeric_values_are_dropped_with_one_warning_per_metric(sdk: ModuleType) -> None:
    parser = DatagramParser()
    first = parser.parse(sdk._encode_metrics(1, 0.0, {"loss": 1.0, "acc": "high", "ok": True})[0])
    assert [p.name for p in first.points] == ["loss"]
    assert first.warnings == [
        "starforge: metric 'acc' at step 1 is not a number ('high'); dropped (warned once per metric)",
        "starforge: metric 'ok' at step 1 is not a number (True); dropped (warned once per metric)",
    ]
    again = parser.parse(sdk._encode_metrics(2, 0.0, {"acc": "low"})[0])
    assert again.points == []
    assert again.warnings == []


def test_malformed_datagrams_warn_a_bounded_number_of_times() -> None:
    parser = DatagramParser()
    warnings = []
    for data in [b"not json", b"[1]", b'{"kind":"metrics","step":-1}', b'{"kind":"x","step":1}'] * 3:
        warnings += parser.parse(data).warnings
    assert len(warnings) == 5
    assert warnings[0].startswith("starforge: ignored a malformed report: not JSON")
    assert warnings[-1].endswith("(further malformed reports are dropped without a warning)")


def test_a_huge_report_is_split_and_a_huge_sample_is_cut(sdk: ModuleType) -> None:
    scalars = {f"metric/{i:05d}/" + "x" * 40: float(i) for i in range(8000)}
    datagrams = sdk._encode_metrics(5, 0.0, scalars)
    assert len(datagrams) > 1
    assert all(len(d) <= sdk.MAX_DATAGRAM for d in datagrams)
    parser = DatagramParser()
    names = [p.name for d in datagrams for p in parser.parse(d).points]
    assert names == list(scalars)

    data = sdk._encode_sample(1, 0.0, "p" * 500_000, "c" * 500_000, None, {})
    assert len(data) <= sdk.MAX_DATAGRAM
    [sample] = DatagramParser().parse(data).samples
    assert sample.extra["starforge_truncated"] == "true"
    assert len(sample.prompt) == sdk.TRUNCATED_TEXT


def test_step_auto_increments_and_samples_use_the_last_step(
    sdk: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("FORGE_REPORT_SOCKET", raising=False)
    assert [sdk.report(loss=1.0) for _ in range(3)] == [0, 1, 2]
    assert sdk.report(step=10, loss=1.0) == 10
    assert sdk.report(loss=1.0) == 11
    assert sdk._reporter.step_for(None, advance=False) == 11
    sdk.sample("p", "c")
    # Outside StarForge: exactly one warning, then silence.
    assert capsys.readouterr().err.count("FORGE_REPORT_SOCKET is not set") == 1


def test_sdk_helpers(sdk: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    monkeypatch.setenv("FORGE_OUT_DIR", str(tmp_path / "out"))
    monkeypatch.setenv("FORGE_ATTEMPT_NUMBER", "3")
    monkeypatch.setenv("FORGE_RESUME", "1")
    config = tmp_path / "config.json"
    config.write_text('{"lr": 0.1}')
    monkeypatch.setenv("FORGE_CONFIG", str(config))
    assert sdk.out_dir() == tmp_path / "out"
    assert sdk.checkpoint_dir() == tmp_path / "out" / "checkpoints"
    assert (tmp_path / "out" / "checkpoints").is_dir()
    assert sdk.attempt() == 3
    assert sdk.resumed() is True
    assert sdk.config() == {"lr": 0.1}


def test_sdk_is_python_38_syntax() -> None:
    """Training images may have old Pythons: the SDK must parse as 3.8 code."""
    import ast

    ast.parse(SDK_PATH.read_text(), feature_version=(3, 8))
    assert sys.version_info >= (3, 8)
