"""The metric store: scalar points per job, name and step; series read back downsampled."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from sqlalchemy import insert, select
from sqlalchemy.orm import Session
from starforge_api.job.v1 import telemetry_pb2

from control.db import models as m
from control.db.engine import insert_rows
from control.ledger.convert import ts


def append(s: Session, job_id: str, attempt_number: int, points: Sequence[tuple[int, str, float, float]]) -> None:
    """Insert (step, name, value, time) points."""
    insert_rows(
        s,
        m.MetricPoint.__tablename__,
        ("job_id", "attempt_number", "step", "name", "value", "at"),
        [(job_id, attempt_number, st, n, v, t) for st, n, v, t in points],
    )


def _downsample(points: list[m.MetricPoint], max_points: int) -> list[m.MetricPoint]:
    if max_points <= 0 or len(points) <= max_points:
        return points
    stride = (len(points) - 1) / (max_points - 1)
    return [points[round(i * stride)] for i in range(max_points)]


def series(
    s: Session, job_id: str, names: Sequence[str] = (), *, after_step: int = 0, max_points: int = 0
) -> list[telemetry_pb2.MetricSeries]:
    """One series per metric name, sorted by name. When a step was reported by several attempts
    (a resumed run repeating steps after its checkpoint), the latest attempt's value wins."""
    stmt = select(m.MetricPoint).where(m.MetricPoint.job_id == job_id)
    if names:
        stmt = stmt.where(m.MetricPoint.name.in_(list(names)))
    if after_step > 0:
        stmt = stmt.where(m.MetricPoint.step > after_step)
    stmt = stmt.order_by(m.MetricPoint.name, m.MetricPoint.step, m.MetricPoint.attempt_number, m.MetricPoint.id)
    by_name: dict[str, dict[int, m.MetricPoint]] = defaultdict(dict)
    for p in s.scalars(stmt):
        by_name[p.name][p.step] = p
    out = []
    for name in sorted(by_name):
        pts = _downsample(sorted(by_name[name].values(), key=lambda p: p.step), max_points)
        ser = telemetry_pb2.MetricSeries(name=name)
        for p in pts:
            point = ser.points.add(step=p.step, name=p.name, value=p.value)
            t = ts(p.at)
            if t is not None:
                point.time.CopyFrom(t)
        out.append(ser)
    return out


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
