"""Parsing the SDK's report datagrams into MetricPoint and Sample messages.

Wire format (one JSON object per datagram, written by ``capsule/sdk/starforge``)::

    {"v": 1, "kind": "metrics", "step": 12, "time": 1700000000.5, "scalars": {"loss": 0.25}}
    {"v": 1, "kind": "sample", "step": 12, "time": 1700000000.5, "prompt": "...",
     "completion": "...", "reward": 1.0, "extra": {"answer": "42"}}

Bad input never stops training: it becomes a SYSTEM warning in the job's log (once per metric
name, so a loop reporting a string every step does not flood the log).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

from sfpb.starforge.job import v1 as job

from .reporter import from_epoch

INT64_MAX = (1 << 63) - 1
MAX_NAME_CHARS = 256
MAX_MALFORMED_WARNINGS = 5


@dataclass
class Parsed:
    points: list[job.MetricPoint] = field(default_factory=list)
    samples: list[job.Sample] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _is_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        float(value)
    except OverflowError:
        return False
    return True


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class DatagramParser:
    """Stateful only for de-duplicating warnings."""

    def __init__(self) -> None:
        self._warned_metrics: set[str] = set()
        self._malformed = 0

    def parse(self, data: bytes) -> Parsed:
        out = Parsed()
        try:
            doc = json.loads(data.decode("utf-8", errors="replace"))
        except ValueError as exc:
            self._malformed_warning(out, f"not JSON ({exc})")
            return out
        if not isinstance(doc, dict):
            self._malformed_warning(out, "not a JSON object")
            return out
        step = doc.get("step")
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= INT64_MAX:
            self._malformed_warning(out, f"step must be a non-negative integer, got {_short(step)}")
            return out
        stamp = doc.get("time")
        seconds = float(stamp) if isinstance(stamp, (int, float)) and _is_number(stamp) else math.nan
        at = from_epoch(seconds if math.isfinite(seconds) else time.time())
        kind = doc.get("kind")
        if kind == "metrics":
            self._metrics(doc, step, at, out)
        elif kind == "sample":
            self._sample(doc, step, out)
        else:
            self._malformed_warning(out, f"unknown kind {_short(kind)}")
        return out

    def _metrics(self, doc: dict[str, Any], step: int, at: Any, out: Parsed) -> None:
        scalars = doc.get("scalars")
        if not isinstance(scalars, dict):
            self._malformed_warning(out, "metrics without a 'scalars' object")
            return
        for name, value in scalars.items():
            if not name or len(name) > MAX_NAME_CHARS:
                self._malformed_warning(out, f"metric name {_short(name)} is empty or too long")
                continue
            if not _is_number(value):
                if name not in self._warned_metrics:
                    self._warned_metrics.add(name)
                    out.warnings.append(
                        f"starforge: metric {name!r} at step {step} is not a number ({_short(value)}); "
                        "dropped (warned once per metric)"
                    )
                continue
            out.points.append(job.MetricPoint(step=step, name=name, value=float(value), time=at))

    def _sample(self, doc: dict[str, Any], step: int, out: Parsed) -> None:
        reward = doc.get("reward")
        if reward is not None and not _is_number(reward):
            self._malformed_warning(out, f"sample reward {_short(reward)} is not a number")
            reward = None
        extra = doc.get("extra") or {}
        if not isinstance(extra, dict):
            extra = {"extra": str(extra)}
        out.samples.append(
            job.Sample(
                step=step,
                prompt=str(doc.get("prompt", "")),
                completion=str(doc.get("completion", "")),
                reward=None if reward is None else float(reward),
                extra={str(k): v if isinstance(v, str) else json.dumps(v) for k, v in extra.items()},
            )
        )

    def _malformed_warning(self, out: Parsed, why: str) -> None:
        self._malformed += 1
        if self._malformed <= MAX_MALFORMED_WARNINGS:
            suffix = " (further malformed reports are dropped without a warning)"
            last = self._malformed == MAX_MALFORMED_WARNINGS
            out.warnings.append(f"starforge: ignored a malformed report: {why}{suffix if last else ''}")
