"""`sf job ls`'s table as plain text, character for character what rich prints into a pipe.

rich costs `sf job ls` ~40 ms of imports and ~20 ms to lay out 20 rows (docs/benchmarks.md,
**cli**). When stdout is not a terminal (scripts, pipes: no colours, no terminal queries beyond
the width), `plain_table` lays the table out with rich's own rules for a `Table(box=None,
pad_edge=False)`: columns as wide as their widest cell plus one space of padding between
neighbours, and when that is wider than the console, the wrapping columns give up the excess,
their cells word-wrapped and over-long words folded. Whenever the output might differ from
rich's (a terminal, FORCE_COLOR or TTY_COMPATIBLE set, text that is not printable ASCII, a table
that only fits by shrinking its no-wrap columns too) it returns None and rich draws the table.
tests/unit/cli/test_tables.py compares the two on generated tables.
"""

from __future__ import annotations

import itertools
import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from cli.follow import state_name
from cli.output import age

if TYPE_CHECKING:
    from starforge_api.job.v1 import job_pb2

JOB_COLUMNS = ("ID", "EXPERIMENT", "METHOD", "STATE", "WAITING", "AGE", "ATTEMPTS")
JOB_WRAPS = tuple(c == "WAITING" for c in JOB_COLUMNS)  # the others are no_wrap

_PRINTABLE = re.compile(r"[ -~]*")
_WORD = re.compile(r"\s*\S+\s*")


def printable(text: str) -> bool:
    """Whether `text` is printable ASCII only (what this module lays out as rich would)."""
    return _PRINTABLE.fullmatch(text) is not None


def wait_text(job: job_pb2.Job) -> str:
    """ "#2 quota: …" for a QUEUED job, "" otherwise."""
    from starforge_api.job.v1 import job_state_pb2

    if job.state != job_state_pb2.JOB_STATE_QUEUED or not job.HasField("wait"):
        return ""
    w = job.wait
    position = f"#{w.queue_position} " if w.queue_position else ""
    if w.message:
        return f"{position}{w.message}"
    reason = job_state_pb2.WaitReason.Name(w.reason).removeprefix("WAIT_REASON_").lower().replace("_", " ")
    return f"{position}{reason}"


def job_row(job: job_pb2.Job) -> list[str]:
    """One row of `sf job ls` (the cells of JOB_COLUMNS)."""
    return [
        job.job_id,
        job.experiment + (f" [{job.stage}]" if job.stage else ""),
        job.method,
        state_name(job.state),
        wait_text(job),
        age(job.create_time),
        str(len(job.attempts)),
    ]


def plain_width(env: Mapping[str, str] | None = None) -> int | None:
    """The width rich would give a console on stdout, or None when rich would see a terminal
    (colours, styles) or the result could differ from what this module draws."""
    environ = os.environ if env is None else env
    if "TTY_COMPATIBLE" in environ or "FORCE_COLOR" in environ or os.name == "nt":
        return None
    try:
        if sys.stdout.isatty():
            return None
    except ValueError:  # a closed stdout: let rich decide
        return None
    columns = environ.get("COLUMNS")
    if columns is not None and columns.isdigit():
        width = int(columns)
    else:
        width = 0
        for fd in (0, 1, 2):  # rich asks every standard stream for the terminal's size
            try:
                width = os.get_terminal_size(fd).columns
            except (AttributeError, ValueError, OSError):
                continue
            break
        width = width or 80
    return width if width >= 8 else None


def _divide(text: str, width: int) -> list[str]:
    """`text` word-wrapped to `width`, over-long words folded (rich's divide_line, ASCII only)."""
    breaks: list[int] = []
    offset = 0
    for match in _WORD.finditer(text):
        start, word = match.start(), match.group(0)
        length = len(word.rstrip())
        if width - offset >= length:
            offset += len(word)
        elif length > width:
            chunks = [word[i : i + width] for i in range(0, len(word), width)]
            for i, chunk in enumerate(chunks):
                if start:
                    breaks.append(start)
                if i == len(chunks) - 1:
                    offset = len(chunk)
                else:
                    start += len(chunk)
        elif offset and start:
            breaks.append(start)
            offset = len(word)
    bounds = [0, *breaks, len(text)]
    lines = [text[a:b] for a, b in itertools.pairwise(bounds)] if text else [""]
    return [_fit(line, width) for line in lines]


def _fit(line: str, width: int) -> str:
    """rich's rstrip_end + truncate: trailing whitespace past `width` dropped, then cut to it."""
    if len(line) > width:
        trailing = len(line) - len(line.rstrip())
        line = line[: len(line) - min(trailing, len(line) - width)]
    return line[:width]


def _widths(cells: Sequence[Sequence[str]], wraps: Sequence[bool], pads: Sequence[int], width: int) -> list[int] | None:
    """Each column's width with its padding, as rich's Table computes it; None when rich would
    have to shrink a no-wrap column (its last resort), which this module does not draw."""
    widths = []
    for col, pad in enumerate(pads):
        longest = max(len(row[col]) for row in cells) + pad
        widths.append(min(longest, width) or 1)
    excess = sum(widths) - width
    while excess > 0:
        wrapping = [w for w, wrap in zip(widths, wraps, strict=True) if wrap]
        if not wrapping:
            break
        top = max(wrapping)
        second = max((w for w in wrapping if w != top), default=0)
        if top == second:
            break
        ratios = [1 if w == top and wrap else 0 for w, wrap in zip(widths, wraps, strict=True)]
        total_ratio, remaining = sum(ratios), excess
        for i, ratio in enumerate(ratios):
            if ratio:
                cut = min(excess, top - second, round(remaining / total_ratio))
                widths[i] -= cut
                remaining -= cut
                total_ratio -= 1
        excess = sum(widths) - width
    if excess > 0 or any(w - p < 1 for w, p in zip(widths, pads, strict=True)):
        return None
    return widths


def plain_table(header: Sequence[str], rows: Sequence[Sequence[str]], wraps: Sequence[bool], width: int) -> str | None:
    """The text rich prints for `Table(box=None, pad_edge=False)` with these columns (`wraps`:
    which may wrap; all fold over-long words) on a console `width` wide; None when unsure."""
    cells = [list(header), *(list(r) for r in rows)]
    if not all(printable(c) for row in cells for c in row):
        return None
    n = len(header)
    lefts = [0 if i == 0 else 1 for i in range(n)]
    rights = [0 if i == n - 1 else 1 for i in range(n)]
    pads = [a + b for a, b in zip(lefts, rights, strict=True)]
    widths = _widths(cells, wraps, pads, width)
    if widths is None:
        return None
    out: list[str] = []
    for index, row in enumerate(cells):
        columns = []
        for i, text in enumerate(row):
            inner = widths[i] - pads[i]
            lines = _divide(text, inner) if wraps[i] else [_fit(text, inner)]
            columns.append([" " * lefts[i] + line.ljust(inner) + " " * rights[i] for line in lines])
        height = max(len(c) for c in columns)
        for i, column in enumerate(columns):  # the header's cells align to the bottom, the others to the top
            blank = [" " * widths[i]] * (height - len(column))
            columns[i] = blank + column if index == 0 else column + blank
        out.extend("".join(parts) for parts in zip(*columns, strict=True))
    return "".join(line + "\n" for line in out)


def jobs_text(jobs: Sequence[job_pb2.Job]) -> str | None:
    """`sf job ls`'s table for a pipe, as rich would print it; None when rich must print it."""
    width = plain_width()
    if width is None:
        return None
    return plain_table(JOB_COLUMNS, [job_row(j) for j in jobs], JOB_WRAPS, width)
