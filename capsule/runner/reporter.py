"""Everything the runner reports goes through ``Reporter``: build a Record, journal it, wake the sender.

Journalling happens synchronously inside the call, so a record is on disk before the sender can
even see it, and the order of calls is the order of sequence numbers.
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Callable, Iterable

from sfpb.starforge.ingest import v1 as ingest
from sfpb.starforge.job import v1 as job

from .journal import Journal

Phase = job.LifecyclePhase
FailureClass = job.FailureClass
LogStream = job.LogStream


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def from_epoch(seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)


class Reporter:
    """Appends records to the journal with contiguous sequence numbers."""

    def __init__(self, journal: Journal, *, on_record: Callable[[], None] | None = None) -> None:
        self._journal = journal
        self._on_record = on_record

    def set_listener(self, on_record: Callable[[], None]) -> None:
        self._on_record = on_record

    @property
    def last_seq(self) -> int:
        return self._journal.last_seq

    def _emit(self, record: ingest.Record) -> int:
        seq = self._journal.next_seq()
        record.seq = seq
        if record.time is None:
            record.time = now()
        self._journal.append(seq, bytes(record))
        if self._on_record is not None:
            self._on_record()
        return seq

    def lifecycle(
        self,
        phase: job.LifecyclePhase,
        *,
        message: str = "",
        exit_code: int | None = None,
        signal: int = 0,
        failure_class: job.FailureClass = FailureClass.UNSPECIFIED,
        details: dict[str, str] | None = None,
    ) -> int:
        at = now()
        event = job.LifecycleEvent(
            phase=phase,
            time=at,
            exit_code=exit_code,
            signal=signal,
            message=message,
            failure_class=failure_class,
            details=dict(details or {}),
        )
        return self._emit(ingest.Record(time=at, lifecycle=event))

    def log(self, stream: job.LogStream, lines: list[str]) -> int:
        return self._emit(ingest.Record(log_chunk=ingest.LogChunk(stream=stream, lines=list(lines))))

    def system(self, text: str) -> int:
        """A platform message: shown in the job's log and echoed on the runner's stderr."""
        print(text, file=sys.stderr, flush=True)
        return self.log(LogStream.SYSTEM, [text])

    def metrics(self, points: Iterable[job.MetricPoint]) -> int:
        """One record of `points`, sent in columns (one MetricColumns per name, in the order
        reported): the console decodes packed arrays instead of a message per point."""
        columns: dict[str, ingest.MetricColumns] = {}
        for p in points:
            col = columns.get(p.name)
            if col is None:
                col = columns[p.name] = ingest.MetricColumns(name=p.name)
            col.steps.append(p.step)
            col.values.append(p.value)
            col.times.append(p.time.timestamp() if p.time is not None else 0.0)
        return self._emit(ingest.Record(metrics=ingest.MetricBatch(columns=list(columns.values()))))

    def samples(self, samples: Iterable[job.Sample]) -> int:
        return self._emit(ingest.Record(samples=ingest.SampleBatch(samples=list(samples))))
