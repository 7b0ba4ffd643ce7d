"""Metric points parsed from the training command's output, reported like SDK ``starforge.report`` calls.

The adapter's parser sees every line of stdout and stderr as it is read; the points of one read
become one MetricBatch record, journalled before the log lines they came from. A parser that
fails is switched off with one SYSTEM line: parsing metrics must never stop the log or the job.
"""

from __future__ import annotations

from sfpb.starforge.job import v1 as job

from .adapters import MetricParser
from .reporter import Reporter, now

MAX_POINTS = 1000


class LogMetrics:
    def __init__(self, parser: MetricParser, reporter: Reporter) -> None:
        self._parser: MetricParser | None = parser
        self._reporter = reporter

    def observe(self, lines: list[str]) -> None:
        if self._parser is None:
            return
        at = now()
        points: list[job.MetricPoint] = []
        for line in lines:
            try:
                parsed = self._parser.feed(line)
            except Exception as exc:  # a parser bug must not take the log pump down with it
                self._parser = None
                self._reporter.system(
                    f"starforge: reading metrics from the output failed ({type(exc).__name__}: {exc}); "
                    "metrics from log lines are off for this attempt"
                )
                break
            points.extend(job.MetricPoint(step=p.step, name=p.name, value=p.value, time=at) for p in parsed)
        for start in range(0, len(points), MAX_POINTS):
            self._reporter.metrics(points[start : start + MAX_POINTS])
