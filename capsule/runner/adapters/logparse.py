"""Metric lines the frameworks print, parsed into metric points (the platform's metrics for free).

Each parser knows one framework's console format and nothing else; anything that does not match
is ignored (it is still in the job's log). Stdlib only: the runner runs on the image's Python.

- HF Trainer (TRL): ``{'loss': '0.6931', 'grad_norm': '1.2', 'learning_rate': '5e-05', 'epoch': '0.5'}``
  (transformers 5 prints numbers as strings, 4.x as floats). The dict has no step: training log
  lines come every ``logging_steps`` optimizer steps, counted from the checkpoint resumed from.
- verl's console logger: ``step:12 - actor/pg_loss:0.0123 - critic/score/mean:np.float64(0.5)``,
  possibly behind Ray's ``(TaskRunner pid=123)`` prefix.
- NeMo-RL: a ``===== Step 3/100 =====`` header, then ``• Loss: 0.1234`` lines in the
  "Training Results" / "Validation Results" sections and ``• Total step time: 1.23s`` under "Timing".
"""

from __future__ import annotations

import ast
import math
import re

from .base import MetricPoint

_RAY_PREFIX = re.compile(r"^\s*\([^()]*pid=\d+[^()]*\)\s*")
_NUMPY_SCALAR = re.compile(r"^np\.\w+\((.*)\)$")


def _number(raw: object) -> float | None:
    """A finite float from a printed value (float, int, "0.5", "np.float64(0.5)"); None otherwise."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int | float):
        value = float(raw)
    elif isinstance(raw, str):
        text = raw.strip()
        m = _NUMPY_SCALAR.match(text)
        if m:
            text = m.group(1)
        try:
            value = float(text)
        except ValueError:
            return None
    else:
        return None
    return value if math.isfinite(value) else None


class HfTrainerLogParser:
    """HF Trainer / TRL dict lines. Steps: ``start_step + n * logging_steps`` for the n-th training line."""

    def __init__(self, logging_steps: int, start_step: int = 0) -> None:
        self._every = max(1, logging_steps)
        self._step = start_step

    def feed(self, line: str) -> list[MetricPoint]:
        text = line[line.rfind("\r") + 1 :].strip()
        start = text.find("{'")
        if start < 0 or not text.endswith("}"):
            return []
        try:
            logs = ast.literal_eval(text[start:])
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return []
        if not isinstance(logs, dict) or not logs:
            return []
        names = [str(k) for k in logs]
        evaluation = all(n.startswith("eval_") or n == "epoch" for n in names)
        summary = "train_runtime" in logs
        if not evaluation and not summary:
            self._step += self._every
        points = []
        for key, raw in logs.items():
            value = _number(raw)
            if value is not None:
                points.append(MetricPoint(self._step, str(key), value))
        return points


class VerlConsoleParser:
    """verl's ``trainer.logger=['console']`` lines."""

    def feed(self, line: str) -> list[MetricPoint]:
        text = _RAY_PREFIX.sub("", line.strip())
        if not text.startswith("step:"):
            return []
        parts = text.split(" - ")
        try:
            step = int(parts[0].removeprefix("step:").strip())
        except ValueError:
            return []
        points = []
        for part in parts[1:]:
            name, sep, raw = part.rpartition(":")
            value = _number(raw)
            if sep and name.strip() and value is not None:
                points.append(MetricPoint(step, name.strip(), value))
        return points


_NEMO_STEP = re.compile(r"^=+ Step (\d+)/\d+ =+$")
_NEMO_ITEM = re.compile(r"^[•*\-]\s*([^:]+):\s*([-+0-9.eE]+|nan|inf)\s*(s|%)?\b")
_NEMO_SECTIONS = {"training results": "", "validation results": "val/", "timing": "timing/"}


class NemoRlLogParser:
    """NeMo-RL's per-step summaries (examples/run_sft.py, run_grpo.py)."""

    def __init__(self) -> None:
        self._step: int | None = None
        self._prefix: str | None = None

    def feed(self, line: str) -> list[MetricPoint]:
        text = _RAY_PREFIX.sub("", line.strip())
        m = _NEMO_STEP.match(text)
        if m:
            self._step, self._prefix = int(m.group(1)), None
            return []
        section = re.sub(r"^[^A-Za-z]*", "", text).rstrip(":").lower()
        if section in _NEMO_SECTIONS and text.endswith(":"):
            self._prefix = _NEMO_SECTIONS[section]
            return []
        if self._step is None or self._prefix is None:
            return []
        item = _NEMO_ITEM.match(text)
        if item is None:
            return []
        label = re.sub(r"[^a-z0-9]+", "_", item.group(1).strip().lower()).strip("_")
        value = _number(item.group(2))
        if value is None or not label:
            return []
        if self._prefix == "timing/":
            if label != "total_step_time":
                return []  # the per-phase timings are many and named by NeMo-RL's internals
            return [MetricPoint(self._step, "step_time_s", value)]
        return [MetricPoint(self._step, self._prefix + label, value)]
