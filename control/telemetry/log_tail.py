"""The log lines this process just stored, per job, in memory: followers are served from here.

Thousands of `StreamJobLogs(follow)` streams wake together when a job's lines are stored. Each used
to read the lines after its cursor from the ledger (shared reads, but a round of Python per
follower per line, on the one event loop the ingest writes also need). The ingest path hands each
committed batch of lines to `LogTails.add`; a woken follower whose cursor is inside the job's tail
takes the lines after it from here, and the followers at the same cursor share one `LogBatch`
(and the servicer's one response message for it).

Only an accelerator, never the record: the ledger is. A job's tail is one attempt's contiguous run
of offsets (offsets are given out per attempt from its ingest cursor, under a lock, without gaps),
and lines are served from it only when the follower's cursor is at or inside that run, so what a
follower gets is exactly the ledger's next lines. A batch that does not continue the run (lines
stored by another replica or another path in between, a new attempt, batches fed out of order)
starts the tail over; a follower whose cursor is then behind it reads the ledger, as does one that
connects, restarts, or asks for another attempt. Lines stored elsewhere and not yet here are
never skipped, only reached at the follower's next ledger read (see control.jobs_api).

Bounded: at most `max_lines` lines and `max_bytes` per job (oldest batches dropped first),
`max_total_bytes` over all jobs (the job written least recently dropped first), and a job not
written for `idle_seconds` is dropped; the ingest path drops a job's tail when it ends.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from starforge_api.job.v1 import telemetry_pb2

from control.ledger.convert import ts

M = TypeVar("M")
Row = tuple[int, float, str]  # a stored line: (stream, time, text)

# What a held line costs in memory besides its text (its row: a tuple, the time, the text's str
# object), and a batch besides its lines (its tuple of rows, the deque's entry): measured
# (`tests/unit/control/test_log_tail.py` holds the tails to it).
LINE_OVERHEAD_BYTES = 200
BATCH_OVERHEAD_BYTES = 200
MAX_LINES_PER_JOB = 2000  # what one ledger read of a follower returns at most
MAX_BYTES_PER_JOB = 1 << 20
MAX_TOTAL_BYTES = 64 << 20
IDLE_SECONDS = 600.0


class LogBatch:
    """Lines in order (and, on the last batch of a follow, the job's final state).

    The followers at the same cursor get the same batch: `message` builds the response sent for it
    once and hands every stream that same (never mutated) message."""

    __slots__ = ("_message", "final_state", "lines")

    def __init__(self, lines: list[telemetry_pb2.LogLine], final_state: int = 0) -> None:
        self.lines = lines
        self.final_state = final_state
        self._message: Any = None

    @property
    def cursor(self) -> tuple[int, int]:
        """(attempt_number, offset) of the last line; the batch must have lines."""
        last = self.lines[-1]
        return last.attempt_number, last.offset

    def message(self, build: Callable[[LogBatch], M]) -> M:
        """`build(self)`, made on the first call and the same object on every later one."""
        if self._message is None:
            self._message = build(self)
        made: M = self._message
        return made


NOTHING_NEW = LogBatch([])


def to_lines(attempt_number: int, first_offset: int, rows: Sequence[Row]) -> list[telemetry_pb2.LogLine]:
    """Stored (stream, time, text) rows as the ledger gives them back (control.telemetry.logs.to_proto)."""
    out = []
    for i, (stream, at, text) in enumerate(rows):
        line = telemetry_pb2.LogLine(attempt_number=attempt_number, offset=first_offset + i, stream=stream, text=text)  # type: ignore[arg-type]
        t = ts(at)
        if t is not None:
            line.time.CopyFrom(t)
        out.append(line)
    return out


class _JobTail:
    """One attempt's lines with contiguous offsets, as the rows of the batches they were stored in.

    The lines a follower is sent are made from the rows when a follower asks for them, once per
    cursor until the tail moves (`_joined`): the followers at one cursor, usually the newest
    batch's, share that batch and the response built for it. Held as messages, a line cost ~1 KB
    (a LogLine has an arena of its own) and its share of the cached response as much again,
    against ~0.26 KB as a row: a job's 2,000 one-line batches were ~4 MB where the tail counted
    0.5 MB, and the soak's console grew by ~12 MiB a minute."""

    __slots__ = ("_joined", "attempt_number", "batches", "lines", "next_offset", "size", "written_at")

    def __init__(self, attempt_number: int, first_offset: int) -> None:
        self.attempt_number = attempt_number
        self.next_offset = first_offset  # the offset the next stored line gets, when it continues the run
        # (first offset, rows, bytes counted) of every batch held, oldest first
        self.batches: collections.deque[tuple[int, tuple[Row, ...], int]] = collections.deque()
        self.lines = 0
        self.size = 0
        self.written_at = 0.0
        # the lines after an offset, made once for every follower at that offset until the tail
        # changes (followers a busy loop woke late are behind by the same few batches): one
        # list, one response message, instead of one each
        self._joined: dict[int, LogBatch] = {}

    def append(self, first_offset: int, rows: tuple[Row, ...], size: int) -> None:
        self.batches.append((first_offset, rows, size))
        self.next_offset = first_offset + len(rows)
        self.lines += len(rows)
        self.size += size
        self._joined.clear()

    def drop_oldest(self) -> None:
        _, rows, size = self.batches.popleft()
        self.lines -= len(rows)
        self.size -= size
        self._joined.clear()

    def after(self, offset: int) -> LogBatch | None:
        """The lines after `offset` of this attempt; None when the tail does not reach back to it."""
        if offset + 1 == self.next_offset:
            return NOTHING_NEW
        if not self.batches or not self.batches[0][0] <= offset + 1 < self.next_offset:
            return None
        want = offset + 1
        joined = self._joined.get(want)
        if joined is None:
            i = len(self.batches) - 1
            while self.batches[i][0] > want:  # followers are usually at the last batch: look from the end
                i -= 1
            first, rows, _ = self.batches[i]
            wanted = list(rows[want - first :])
            for j in range(i + 1, len(self.batches)):
                wanted.extend(self.batches[j][1])
            joined = self._joined[want] = LogBatch(to_lines(self.attempt_number, want, wanted))
        return joined


class LogTails:
    """Per job, the lines this process stored last (see the module's docstring). Used on the event
    loop only."""

    def __init__(
        self,
        *,
        max_lines: int = MAX_LINES_PER_JOB,
        max_bytes: int = MAX_BYTES_PER_JOB,
        max_total_bytes: int = MAX_TOTAL_BYTES,
        idle_seconds: float = IDLE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_lines, self.max_bytes, self.max_total_bytes = max_lines, max_bytes, max_total_bytes
        self.idle_seconds = idle_seconds
        self._clock = clock
        self._jobs: collections.OrderedDict[str, _JobTail] = collections.OrderedDict()  # least recently written first
        self.total_bytes = 0
        self.served = 0  # batches of lines handed to followers from memory (a count for tests and profiles)

    def __len__(self) -> int:
        return len(self._jobs)

    def held(self, job_id: str) -> int:
        """Lines held for the job (0 when none)."""
        tail = self._jobs.get(job_id)
        return tail.lines if tail is not None else 0

    def add(self, job_id: str, attempt_number: int, first_offset: int, rows: Sequence[Row]) -> None:
        """Lines of `job_id` just committed to the ledger: (stream, time, text) rows stored at
        `first_offset`, `first_offset + 1`, ... of the attempt. Call only after the commit."""
        if not rows:
            return
        held = tuple(rows)
        size = sum(len(text.encode()) for _, _, text in held) + LINE_OVERHEAD_BYTES * len(held) + BATCH_OVERHEAD_BYTES
        tail = self._jobs.get(job_id)
        if tail is None or tail.attempt_number != attempt_number or tail.next_offset != first_offset:
            # not the run's continuation: whatever lies between is only in the ledger
            self.forget(job_id)
            tail = _JobTail(attempt_number, first_offset)
            self._jobs[job_id] = tail
        else:
            self._jobs.move_to_end(job_id)
        before = tail.size
        tail.append(first_offset, held, size)
        tail.written_at = self._clock()
        while tail.batches and (tail.lines > self.max_lines or tail.size > self.max_bytes):
            tail.drop_oldest()
        self.total_bytes += tail.size - before
        if not tail.batches:
            self.forget(job_id)
        self._evict()

    def newest(self, job_id: str) -> tuple[int, int] | None:
        """(attempt number, offset) of the newest line held for the job (None when none)."""
        tail = self._jobs.get(job_id)
        if tail is None or not tail.batches:
            return None
        return tail.attempt_number, tail.next_offset - 1

    def after(self, job_id: str, cursor: tuple[int, int] | None, attempt_number: int = 0) -> LogBatch | None:
        """The job's lines after `cursor` when this tail can tell them all up to its newest line: a
        batch (empty: none after it here), or None when the ledger must be read (no tail, a cursor
        behind it, before it or in another attempt, another attempt asked for)."""
        tail = self._jobs.get(job_id)
        if tail is None or cursor is None or cursor[0] != tail.attempt_number:
            return None
        if attempt_number and attempt_number != tail.attempt_number:
            return None
        batch = tail.after(cursor[1])
        if batch is not None and batch.lines:
            self.served += 1
        return batch

    def forget(self, job_id: str) -> None:
        """Drop the job's tail (it ended, or its run broke); its followers read the ledger."""
        tail = self._jobs.pop(job_id, None)
        if tail is not None:
            self.total_bytes -= tail.size

    def _evict(self) -> None:
        """Jobs not written for `idle_seconds`, then the least recently written while over the total."""
        idle_before = self._clock() - self.idle_seconds
        while self._jobs:
            job_id, tail = next(iter(self._jobs.items()))
            if tail.written_at >= idle_before and self.total_bytes <= self.max_total_bytes:
                return
            self.forget(job_id)
