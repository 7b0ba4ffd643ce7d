"""Time windows of fleets: when a fleet takes work ("Mon-Fri 20:00-08:00 UTC", "22:00-06:00").

A window is one or more comma-separated ranges `[<Day>[-<Day>]] HH:MM-HH:MM`, in UTC (an explicit
"UTC" suffix is accepted; other zones are refused rather than guessed). A range that ends before
it starts crosses midnight; its day names the day it starts. An empty window is always open.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from common.config import ConfigError

DAYS = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
RANGE = re.compile(
    r"^(?:(?P<d1>[a-z]{3})(?:-(?P<d2>[a-z]{3}))?\s+)?(?P<h1>\d{1,2}):(?P<m1>\d{2})-(?P<h2>\d{1,2}):(?P<m2>\d{2})$"
)


@dataclass(frozen=True)
class Range:
    days: frozenset[int]
    start: int  # minutes after midnight
    end: int


def parse(text: str) -> list[Range]:
    text = text.strip()
    if not text:
        return []
    body = text
    if body.upper().endswith(" UTC"):
        body = body[:-4]
    out = []
    for part in body.split(","):
        m = RANGE.match(part.strip().lower())
        if m is None:
            raise ConfigError(f"time window {text!r}: expected ranges like 'Mon-Fri 20:00-08:00 UTC' or '22:00-06:00'")
        d1, d2 = m.group("d1"), m.group("d2")
        if (d1 and d1 not in DAYS) or (d2 and d2 not in DAYS):
            raise ConfigError(f"time window {text!r}: days are {', '.join(d.capitalize() for d in DAYS)}")
        if d1:
            a, b = DAYS.index(d1), DAYS.index(d2 or d1)
            days = frozenset(range(a, b + 1)) if a <= b else frozenset([*range(a, 7), *range(0, b + 1)])
        else:
            days = frozenset(range(7))
        h1, m1, h2, m2 = (int(m.group(k)) for k in ("h1", "m1", "h2", "m2"))
        if h1 > 23 or h2 > 24 or m1 > 59 or m2 > 59:
            raise ConfigError(f"time window {text!r}: hours are 0-23 and minutes 0-59")
        out.append(Range(days, h1 * 60 + m1, h2 * 60 + m2))
    return out


def is_open(text: str, now: dt.datetime | None = None) -> bool:
    ranges = parse(text)
    if not ranges:
        return True
    now = now or dt.datetime.now(dt.UTC)
    minute = now.hour * 60 + now.minute
    day = now.weekday()
    for r in ranges:
        if r.start < r.end:
            if day in r.days and r.start <= minute < r.end:
                return True
        else:  # crosses midnight: [start, 24:00) on its day, [00:00, end) the next day
            if day in r.days and minute >= r.start:
                return True
            if (day - 1) % 7 in r.days and minute < r.end:
                return True
    return False
