"""The metric store: scalar points per job, name and step, stored in columns; series read back downsampled.

A batch of ingest writes one `metric_chunks` row per (attempt, metric name): packed little-endian
arrays of its steps (int64), values and times (float64, epoch seconds), in the order reported. The
row is written in the batch's transaction, with the attempt's ingest cursor, so a point is stored
exactly once whatever the console or the capsule survive, and readers see it as soon as the batch
is acknowledged. Points stored before the columns existed stay in `metric_points` (one row each)
and are read with them.
"""

from __future__ import annotations

import bisect
import struct
import sys
from array import array
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session
from starforge_api.job.v1 import telemetry_pb2

from control.db import models as m
from control.db.engine import insert_rows

_TIME = struct.Struct("<d")
_SWAP = sys.byteorder != "little"  # the stored arrays are little-endian on every machine


def _pack(values: array) -> bytes:  # type: ignore[type-arg]
    if _SWAP:
        values = array(values.typecode, values)
        values.byteswap()
    return values.tobytes()


def _unpack(typecode: str, data: bytes) -> array:  # type: ignore[type-arg]
    out = array(typecode)
    out.frombytes(data)
    if _SWAP:
        out.byteswap()
    return out


class Columns:
    """Points of one ingest batch, per metric name, in the order reported: for each name its parts
    (steps, values and times packed little-endian), one per call that added points."""

    def __init__(self) -> None:
        self.by_name: dict[str, list[tuple[list[int], bytes, bytes]]] = {}
        self.count = 0

    def add_packed(self, name: str, steps: list[int], values: bytes, times: bytes) -> None:
        """Append points of `name`: `values` and `times` hold len(steps) packed little-endian doubles."""
        self.by_name.setdefault(name, []).append((steps, values, times))
        self.count += len(steps)

    def add(self, name: str, steps: list[int], values: Sequence[float], times: Sequence[float]) -> None:
        """Append points (three sequences of one length) of `name`."""
        self.add_packed(name, steps, _pack(array("d", values)), _pack(array("d", times)))

    def add_rows(self, rows: Sequence[tuple[int, str, float, float]]) -> None:
        """Append (step, name, value, time) points."""
        by_name: dict[str, tuple[list[int], list[float], list[float]]] = {}
        for step, name, value, at in rows:
            cols = by_name.get(name)
            if cols is None:
                cols = by_name[name] = ([], [], [])
            cols[0].append(step)
            cols[1].append(value)
            cols[2].append(at)
        for name, (steps, values, times) in by_name.items():
            self.add(name, steps, values, times)

    def take(self) -> Columns:
        out = Columns()
        out.by_name, out.count = self.by_name, self.count
        self.by_name, self.count = {}, 0
        return out


def _stride_of(steps: list[int]) -> int | None:
    """The stride of `steps` when they are first, first + stride, ..., last with stride > 0 (one
    point: 0); None otherwise."""
    if len(steps) == 1:
        return 0
    first, last = steps[0], steps[-1]
    stride = steps[1] - first
    if stride <= 0 or last - first != stride * (len(steps) - 1):
        return None
    return stride if steps == list(range(first, last + 1, stride)) else None


def _evenly_spaced(parts: Sequence[tuple[list[int], bytes, bytes]]) -> tuple[int, int] | None:
    """(first, last) when the steps of all `parts` (none empty), in order, are first, first +
    stride, ..., last with one stride > 0 (or are a single point); None otherwise."""
    stride = 0  # not known yet: single points so far
    last: int | None = None
    for steps, _v, _t in parts:
        inner = _stride_of(steps)
        if inner is None or (last is not None and steps[0] <= last):
            return None
        for known in (inner, 0 if last is None else steps[0] - last):
            if known and stride and known != stride:
                return None
            stride = known or stride
        last = steps[-1]
    assert last is not None
    return parts[0][0][0], last


def _step_data(steps: list[int], first: int, last: int) -> bytes:
    """The packed steps; empty when they are first, first + stride, ..., last (the usual series:
    one point per step, or one every few steps), which the chunk's first/last/points describe."""
    n = len(steps)
    if n == 1:
        return b""
    stride, rest = divmod(last - first, n - 1)
    if stride > 0 and not rest and steps[0] == first and steps == list(range(first, last + 1, stride)):
        return b""
    return _pack(array("q", steps))


def _steps_of(data: bytes, first: int, last: int, points: int) -> Sequence[int]:
    if data:
        return _unpack("q", data)
    if points == 1:
        return [first]
    return range(first, last + 1, (last - first) // (points - 1))


def _chunk_steps(parts: Sequence[tuple[list[int], bytes, bytes]]) -> tuple[int, int, bytes]:
    """A chunk's first and last step and its packed steps (empty for an evenly spaced series)."""
    spaced = _evenly_spaced(parts)
    if spaced is not None:
        return spaced[0], spaced[1], b""
    steps = [step for part in parts for step in part[0]]
    first, last = min(steps), max(steps)
    return first, last, _step_data(steps, first, last)


CHUNK_COLUMNS = (
    "job_id",
    "attempt_number",
    "name",
    "first_step",
    "last_step",
    "points",
    "step_data",
    "value_data",
    "time_data",
)


def append(s: Session, job_id: str, attempt_number: int, columns: Columns) -> None:
    """Store the points of `columns` (one chunk row per metric name), in the session's transaction."""
    insert_rows(s, m.MetricChunk.__tablename__, CHUNK_COLUMNS, chunk_rows(job_id, attempt_number, columns))


def chunk_rows(job_id: str, attempt_number: int, columns: Columns) -> list[tuple[Any, ...]]:
    """The metric chunk rows (`CHUNK_COLUMNS`) of `columns`: one per metric name."""
    rows: list[tuple[Any, ...]] = []
    for name, added in columns.by_name.items():
        parts = [part for part in added if part[0]]
        if not parts:
            continue
        first, last, step_data = _chunk_steps(parts)
        points = sum(len(part[0]) for part in parts)
        values = b"".join(part[1] for part in parts)
        times = b"".join(part[2] for part in parts)
        rows.append((job_id, attempt_number, name, first, last, points, step_data, values, times))
    return rows


def count(s: Session, job_id: str, name: str | None = None) -> int:
    """How many points are stored for a job (every attempt, both stores), of one metric or all."""
    chunked = select(func.coalesce(func.sum(m.MetricChunk.points), 0)).where(m.MetricChunk.job_id == job_id)
    rows = select(func.count()).select_from(m.MetricPoint).where(m.MetricPoint.job_id == job_id)
    if name is not None:
        chunked = chunked.where(m.MetricChunk.name == name)
        rows = rows.where(m.MetricPoint.name == name)
    return int(s.scalar(chunked) or 0) + int(s.scalar(rows) or 0)


def _pick(values: Sequence[float], max_points: int) -> Sequence[int]:
    """Indices (ascending) of at most `max_points` of `values` that keep the series' shape: the
    first and the last point, and between them, in (max_points - 2) // 2 buckets of equal count,
    each bucket's smallest and largest value. All of them when max_points <= 0 or they fit."""
    n = len(values)
    if max_points <= 0 or n <= max_points:
        return range(n)
    if max_points == 1:
        return [n - 1]
    buckets = (max_points - 2) // 2
    out = [0]
    inner = n - 2
    for b in range(buckets):
        lo_i = 1 + b * inner // buckets
        hi_i = 1 + (b + 1) * inner // buckets
        if lo_i >= hi_i:
            continue
        part = values[lo_i:hi_i]  # min, max and index run in C on an array or list slice
        a = part.index(min(part))
        z = part.index(max(part))
        if a > z:
            a, z = z, a
        out.append(lo_i + a)
        if z != a:
            out.append(lo_i + z)
    out.append(n - 1)
    return out


def _series_pb(
    name: str,
    values: Sequence[float],
    step_of: Callable[[int], int],
    time_of: Callable[[int], float],
    max_points: int,
) -> telemetry_pb2.MetricSeries:
    ser = telemetry_pb2.MetricSeries(name=name)
    for i in _pick(values, max_points):
        point = ser.points.add(step=step_of(i), name=name, value=values[i])
        at = time_of(i)
        if at is not None:  # as ledger.convert.ts, without its temporary message
            seconds, nanos = divmod(int(at * 1e9), 1_000_000_000)
            point.time.seconds = seconds
            point.time.nanos = nanos
    return ser


_Chunk = tuple[int, int, int, int, bytes, bytes, bytes]  # attempt, first, last, points, steps, values, times


def _in_order(chunks: list[_Chunk]) -> bool:
    """Whether the chunks (in the order stored) are of one attempt, each one's steps the evenly
    spaced run its first/last/points describe, each starting after the previous one ended: the
    usual series, whose points need no merging (no step reported twice)."""
    prev_last: int | None = None
    for attempt, first, last, _n, step_data, _v, _t in chunks:
        if attempt != chunks[0][0] or step_data or (prev_last is not None and first <= prev_last):
            return False
        prev_last = last
    return True


class _InOrder:
    """The points of chunks `_in_order` accepted, steps above `after_step`: their values as one
    column; a point's step and time are looked up by index (only the points kept are)."""

    def __init__(self, chunks: list[_Chunk], after_step: int, up_to_step: int) -> None:
        self.starts: list[int] = []  # index of each chunk's first point kept
        self.firsts: list[int] = []  # its step
        self.strides: list[int] = []
        self.times: list[tuple[bytes, int]] = []  # each chunk's times and how many were skipped
        parts = []
        total = 0
        for _a, first, last, count_, _steps, value_data, time_data in chunks:
            stride = (last - first) // (count_ - 1) if count_ > 1 else 1
            skip = (after_step - first) // stride + 1 if after_step > 0 and first <= after_step else 0
            end = count_
            if up_to_step > 0 and last > up_to_step:
                end = max(0, (up_to_step - first) // stride + 1)
            if skip >= end:
                continue
            self.starts.append(total)
            self.firsts.append(first + skip * stride)
            self.strides.append(stride)
            self.times.append((time_data, skip))
            parts.append(value_data[8 * skip : 8 * end])
            total += end - skip
        self.values = _unpack("d", b"".join(parts))

    def step(self, i: int) -> int:
        c = bisect.bisect_right(self.starts, i) - 1
        return self.firsts[c] + (i - self.starts[c]) * self.strides[c]

    def time(self, i: int) -> float:
        c = bisect.bisect_right(self.starts, i) - 1
        data, skip = self.times[c]
        at: float = _TIME.unpack_from(data, 8 * (skip + i - self.starts[c]))[0]
        return at


def series(
    s: Session,
    job_id: str,
    names: Sequence[str] = (),
    *,
    after_step: int = 0,
    max_points: int = 0,
    up_to_step: int = 0,
) -> list[telemetry_pb2.MetricSeries]:
    """One series per metric name, sorted by name. When a step was reported several times (a
    resumed run repeating steps after its checkpoint), the latest attempt's value wins, and within
    an attempt the one reported last. Steps above `after_step` and, when it is > 0, at most
    `up_to_step`. With `max_points` > 0 each series is cut to at most that many
    points by `_pick` (first, last, and each bucket's extremes)."""
    # name -> attempt -> step -> (value, time); attempts are applied in order at the end
    found: dict[str, dict[int, dict[int, tuple[float, float]]]] = defaultdict(lambda: defaultdict(dict))

    old = select(
        m.MetricPoint.name, m.MetricPoint.attempt_number, m.MetricPoint.step, m.MetricPoint.value, m.MetricPoint.at
    )
    old = old.where(m.MetricPoint.job_id == job_id)
    if names:
        old = old.where(m.MetricPoint.name.in_(list(names)))
    if after_step > 0:
        old = old.where(m.MetricPoint.step > after_step)
    if up_to_step > 0:
        old = old.where(m.MetricPoint.step <= up_to_step)
    for name, attempt, step, value, at in s.execute(old.order_by(m.MetricPoint.id)):
        found[name][attempt][step] = (value, at)

    chunks = select(
        m.MetricChunk.name, m.MetricChunk.attempt_number, m.MetricChunk.first_step, m.MetricChunk.last_step,
        m.MetricChunk.points, m.MetricChunk.step_data, m.MetricChunk.value_data, m.MetricChunk.time_data,
    ).where(m.MetricChunk.job_id == job_id)  # fmt: skip
    if names:
        chunks = chunks.where(m.MetricChunk.name.in_(list(names)))
    if after_step > 0:
        chunks = chunks.where(m.MetricChunk.last_step > after_step)
    if up_to_step > 0:
        chunks = chunks.where(m.MetricChunk.first_step <= up_to_step)
    by_name: dict[str, list[_Chunk]] = defaultdict(list)
    for name, *chunk in s.execute(chunks.order_by(m.MetricChunk.id)):
        by_name[name].append(tuple(chunk))  # type: ignore[arg-type]

    out: dict[str, telemetry_pb2.MetricSeries] = {}
    for name, its in by_name.items():
        if name not in found and _in_order(its):  # the usual series: straight from the columns
            cols = _InOrder(its, after_step, up_to_step)
            out[name] = _series_pb(name, cols.values, cols.step, cols.time, max_points)
            continue
        for attempt, first, last, count_, step_data, value_data, time_data in its:
            steps = _steps_of(step_data, first, last, count_)
            points = zip(_unpack("d", value_data), _unpack("d", time_data), strict=True)
            into = found[name][attempt]
            if after_step > 0 or up_to_step > 0:
                top = up_to_step if up_to_step > 0 else None
                into.update(
                    (st, p)
                    for st, p in zip(steps, points, strict=True)
                    if (after_step <= 0 or st > after_step) and (top is None or st <= top)
                )
            else:
                into.update(zip(steps, points, strict=True))

    for name, by_attempt in found.items():
        merged: dict[int, tuple[float, float]] = {}
        for attempt in sorted(by_attempt):
            merged.update(by_attempt[attempt])
        steps = sorted(merged)
        values = [merged[st][0] for st in steps]
        times = [merged[st][1] for st in steps]
        out[name] = _series_pb(name, values, steps.__getitem__, times.__getitem__, max_points)
    return [out[name] for name in sorted(out)]


def append_samples(
    s: Session, job_id: str, attempt_number: int, samples: Sequence[telemetry_pb2.Sample], at: float
) -> None:
    import json

    if samples:
        s.execute(
            insert(m.Sample),
            [
                {
                    "job_id": job_id,
                    "attempt_number": attempt_number,
                    "step": x.step,
                    "prompt": x.prompt,
                    "completion": x.completion,
                    "reward": x.reward if x.HasField("reward") else None,
                    "extra": json.dumps(dict(x.extra)),
                    "at": at,
                }
                for x in samples
            ],
        )


def samples(s: Session, job_id: str, limit: int) -> list[telemetry_pb2.Sample]:
    import json

    rows = s.scalars(select(m.Sample).where(m.Sample.job_id == job_id).order_by(m.Sample.id.desc()).limit(limit))
    out = []
    for r in rows:
        x = telemetry_pb2.Sample(step=r.step, prompt=r.prompt, completion=r.completion, extra=json.loads(r.extra))
        if r.reward is not None:
            x.reward = r.reward
        out.append(x)
    return out
