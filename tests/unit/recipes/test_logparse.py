"""Metric-line parsers on lines captured from the frameworks' own output."""

from __future__ import annotations

from typing import Any, cast

from capsule.runner.adapters.base import MetricPoint
from capsule.runner.adapters.logparse import HfTrainerLogParser, NemoRlLogParser, VerlConsoleParser
from capsule.runner.logmetrics import LogMetrics
from capsule.runner.reporter import Reporter

# trl sft (TRL 1.16, transformers 5.24) on CPU: stdout lines as the runner splits them.
TRL_LINES = [
    "{'loss': '5.914', 'grad_norm': '2.096', 'learning_rate': '2e-05', 'entropy': '5.923', "
    "'mean_token_accuracy': '0', 'num_tokens': '41', 'epoch': '0.0625'}",
    " 25%|##5       | 1/4 [00:00<00:00,  7.00it/s]\r{'loss': '5.912', 'grad_norm': '1.933', "
    "'learning_rate': '1.5e-05', 'epoch': '0.125'}",
    "Writing model shards: 100%|##########| 1/1 [00:00<00:00, 64.15it/s]",
    "{'eval_loss': '5.80', 'eval_runtime': '0.1', 'epoch': '0.125'}",
    "{'train_runtime': '0.6219', 'train_samples_per_second': '25.73', 'train_loss': '5.901', 'epoch': '0.25'}",
    # transformers 4.x printed floats
    "{'loss': 0.6931, 'grad_norm': 1.5, 'learning_rate': 5e-05, 'epoch': 0.5}",
    "{'loss': nan}",  # not a literal: ignored
    "{'note': 'text only'}",
]


def test_hf_trainer_dict_lines_with_steps_from_logging_steps() -> None:
    parser = HfTrainerLogParser(logging_steps=2)
    points = [p for line in TRL_LINES for p in parser.feed(line)]
    by_step: dict[int, dict[str, float]] = {}
    for p in points:
        by_step.setdefault(p.step, {})[p.name] = p.value
    assert by_step[2] == {
        "loss": 5.914,
        "grad_norm": 2.096,
        "learning_rate": 2e-05,
        "entropy": 5.923,
        "mean_token_accuracy": 0.0,
        "num_tokens": 41.0,
        "epoch": 0.0625,
    }
    assert by_step[4] == {
        "loss": 5.912,
        "grad_norm": 1.933,
        "learning_rate": 1.5e-05,
        "epoch": 0.125,
        "eval_loss": 5.80,
        "eval_runtime": 0.1,
        "train_runtime": 0.6219,
        "train_samples_per_second": 25.73,
        "train_loss": 5.901,
    } | {"epoch": 0.25}
    assert by_step[6] == {"loss": 0.6931, "grad_norm": 1.5, "learning_rate": 5e-05, "epoch": 0.5}
    assert sorted(by_step) == [2, 4, 6]
    # the text-only dict was a logging step too (step 8): the next one is 10
    assert parser.feed("{'loss': '1.0'}") == [MetricPoint(10, "loss", 1.0)]


def test_verl_console_lines() -> None:
    parser = VerlConsoleParser()
    assert parser.feed(
        "step:3 - actor/pg_loss:-0.0123 - actor/entropy:np.float64(1.25) - critic/score/mean:0.5 - "
        "timing_s/step:12.345 - training/global_step:3"
    ) == [
        MetricPoint(3, "actor/pg_loss", -0.0123),
        MetricPoint(3, "actor/entropy", 1.25),
        MetricPoint(3, "critic/score/mean", 0.5),
        MetricPoint(3, "timing_s/step", 12.345),
        MetricPoint(3, "training/global_step", 3.0),
    ]
    assert parser.feed("(TaskRunner pid=4321) step:4 - val-core/openai/gsm8k/reward/mean@1:0.625") == [
        MetricPoint(4, "val-core/openai/gsm8k/reward/mean@1", 0.625)
    ]
    assert parser.feed("(TaskRunner pid=1, ip=10.0.0.2) step:5 - actor/lr:1e-06 - x:nan - y:np.int64(7)") == [
        MetricPoint(5, "actor/lr", 1e-06),
        MetricPoint(5, "y", 7.0),
    ]
    for other in ("Training Progress:  10%|#", "step:x - a:1", "stepping: 3", "(WorkerDict pid=9) INFO step:"):
        assert parser.feed(other) == []


NEMO_LINES = """
========================= Epoch 1/1 =========================

========================= Step 7/100 =========================
▶ Preparing batch...
▶ Generating responses for batch of size 512...

📊 Training Results:
  • Loss: 0.0123
  • Generation KL Error: 0.0012
  • Avg Reward: 0.4567
  • Mean Generation Length: 123.4567

⏱️  Timing:
  • Total step time: 12.34s
  • generation: 6.10s (49.4%)

📊 Validation Results:
  • Accuracy: 0.5000
""".splitlines()


def test_nemo_rl_step_summaries() -> None:
    parser = NemoRlLogParser()
    points = [p for line in NEMO_LINES for p in parser.feed(line)]
    assert points == [
        MetricPoint(7, "loss", 0.0123),
        MetricPoint(7, "generation_kl_error", 0.0012),
        MetricPoint(7, "avg_reward", 0.4567),
        MetricPoint(7, "mean_generation_length", 123.4567),
        MetricPoint(7, "step_time_s", 12.34),
        MetricPoint(7, "val/accuracy", 0.5),
    ]
    assert NemoRlLogParser().feed("  • Loss: 0.5") == []  # no step header yet


class _Reporter:
    def __init__(self) -> None:
        self.batches: list[list[Any]] = []

    def metrics(self, points: list[Any]) -> int:
        self.batches.append(points)
        return len(self.batches)


def test_the_runner_reports_parsed_points_like_sdk_metrics() -> None:
    reporter = _Reporter()
    observe = LogMetrics(VerlConsoleParser(), cast(Reporter, reporter)).observe
    observe(["starting", "step:1 - a:0.5 - b:2", "step:2 - a:0.25"])
    observe(["nothing to see"])
    (batch,) = reporter.batches
    assert [(p.step, p.name, p.value) for p in batch] == [(1, "a", 0.5), (1, "b", 2.0), (2, "a", 0.25)]
    assert all(p.time is not None for p in batch)


class _Broken:
    def feed(self, line: str) -> list[MetricPoint]:
        if line == "boom":
            raise ValueError("bad line")
        return [MetricPoint(1, "x", 1.0)]


def test_a_failing_parser_is_switched_off_with_one_message() -> None:
    reporter = _Reporter()
    messages: list[str] = []
    reporter.system = messages.append  # type: ignore[attr-defined]
    metrics = LogMetrics(_Broken(), cast(Reporter, reporter))
    metrics.observe(["ok", "boom", "ok"])
    metrics.observe(["ok"])
    assert [[(p.step, p.name) for p in b] for b in reporter.batches] == [[(1, "x")]]
    assert len(messages) == 1 and "metrics from log lines are off" in messages[0]
