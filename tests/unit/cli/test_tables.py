"""`cli.tables` draws `sf job ls`'s table into a pipe exactly as rich does, or declines."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.table import Table
from rich.text import Text
from starforge_api.job.v1 import job_pb2, job_state_pb2

from cli import render, tables


def _rich(header: list[str], rows: list[list[str]], wraps: list[bool], width: int) -> str:
    """What `sf`'s rich console prints for this table into a pipe `width` columns wide."""
    table = Table(box=None, pad_edge=False, header_style="bold")
    for name, wrap in zip(header, wraps, strict=True):
        table.add_column(name, no_wrap=not wrap, overflow="fold")
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    buffer = io.StringIO()
    Console(file=buffer, width=width, highlight=False, soft_wrap=False, force_terminal=False).print(table)
    return buffer.getvalue()


WORDS = st.text(alphabet="abcdefghij#:-/.()[]", min_size=0, max_size=30)
CELL = st.lists(WORDS, max_size=6).map(" ".join) | st.sampled_from(["", " ", "  a  b ", "x" * 90, "#1 drain: fleet"])


@settings(max_examples=400, deadline=None)
@given(
    data=st.data(),
    columns=st.integers(min_value=1, max_value=7),
    width=st.integers(min_value=8, max_value=160),
)
def test_generated_tables_match_rich_whenever_drawn(data: st.DataObject, columns: int, width: int) -> None:
    header = data.draw(
        st.lists(st.text(alphabet="ABCDEFGHIJ#", min_size=1, max_size=10), min_size=columns, max_size=columns)
    )
    wraps = data.draw(st.lists(st.booleans(), min_size=columns, max_size=columns))
    rows = data.draw(st.lists(st.lists(CELL, min_size=columns, max_size=columns), max_size=6))
    ours = tables.plain_table(header, rows, wraps, width)
    if ours is not None:
        assert ours == _rich(header, rows, wraps, width)


def _jobs(n: int) -> list[job_pb2.Job]:
    return [
        job_pb2.Job(
            job_id=f"jm8sygq4jrhc{i:02d}",
            experiment="exp",
            stage="sft" if i % 3 == 0 else "",
            method="custom/custom",
            state=job_state_pb2.JOB_STATE_QUEUED if i % 2 else job_state_pb2.JOB_STATE_RUNNING,
            wait=job_pb2.WaitInfo(queue_position=i, message="drain: fleet local is drained (benchmark)"),
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("width", [70, 80, 120, 200])
def test_the_jobs_table_is_drawn_as_rich_draws_it(width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    for var in ("FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(var, raising=False)
    jobs = _jobs(20)
    ours = tables.jobs_text(jobs)
    assert ours is not None
    buffer = io.StringIO()
    Console(file=buffer, width=width, highlight=False, soft_wrap=False).print(render.jobs_table(jobs))
    assert ours == buffer.getvalue()


def test_terminals_colours_and_other_text_are_left_to_rich(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert tables.jobs_text(_jobs(2)) is None
    monkeypatch.delenv("FORCE_COLOR")
    assert tables.plain_width() == 80
    assert tables.plain_table(["A"], [["caf\u00e9"]], [True], 80) is None
    assert tables.plain_table(["A"], [["two\nlines"]], [True], 80) is None
    monkeypatch.setenv("COLUMNS", "40")  # only fits if rich shrinks the no-wrap columns too
    assert tables.jobs_text(_jobs(2)) is None
