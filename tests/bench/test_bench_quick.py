"""Every `make bench` row's harness works: each benchmark runs in quick mode (STARFORGE_BENCH_QUICK=1,
tiny sizes, the costly peers left out) as `python -m bench NAME`, in its own work folder, and must
produce its rows: a finite figure, and a ratio to its peer or an explicit "peer not run in quick
mode" / "no peer". No timing is asserted: the figures of a quick run mean nothing.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import subprocess
import sys

import pytest

from bench.__main__ import MODULES
from bench.common import NO_PEER, PEER_NOT_RUN

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Rows that need headless Chromium and the built web console (as tests/browser does).
BROWSER = {"web"}
# Rows measured on the same runs (bench/trivial.py's trivial jobs, cached per process) run in one
# `python -m bench` process, as `make bench` runs them: the harness is the same, run once.
SHARED_RUNS = [("submit", "capsule")]


def _groups() -> list[tuple[str, ...]]:
    grouped = {n for group in SHARED_RUNS for n in group}
    return [*SHARED_RUNS, *((n,) for n in MODULES if n not in grouped)]


def _marks(names: tuple[str, ...]) -> list[pytest.MarkDecorator]:
    marks = [pytest.mark.slow]
    if BROWSER.intersection(names):
        marks.append(pytest.mark.browser)
    return marks


def test_every_row_is_in_one_group() -> None:
    names = [n for group in _groups() for n in group]
    assert sorted(names) == sorted(MODULES) and len(names) == len(set(names))


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("names", [pytest.param(g, marks=_marks(g), id="+".join(g)) for g in _groups()])
def test_bench_row_harness_runs_in_quick_mode(names: tuple[str, ...], tmp_path: pathlib.Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("STARFORGE_BENCH_PEERS",)}
    env.update(STARFORGE_BENCH_QUICK="1", STARFORGE_BENCH_WORK=str(tmp_path / "bench"))
    stale_round = tmp_path / "bench" / "throughput-round-9"  # an earlier run's round of ours
    (stale_round / "console").mkdir(parents=True)
    r = subprocess.run(
        [sys.executable, "-m", "bench", *names],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1100,
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"python -m bench {' '.join(names)} failed (exit {r.returncode}):\n{out[-4000:]}"
    doc = json.loads((tmp_path / "bench" / "results.json").read_text())
    assert doc["quick"] is True and doc["failed"] == [], doc["failed"]
    rows = doc["results"]
    assert rows, f"{names} produced no row:\n{out[-2000:]}"
    # every benchmark of the group produced at least one row (a row's name starts with its own)
    for name in names:
        assert any(row["name"].startswith(name) for row in rows), f"{name} produced no row: {rows}"
    for row in rows:
        figure = row["figure"]
        assert isinstance(figure, int | float) and math.isfinite(figure) and figure >= 0, row
        if row["ratio"] is None:
            assert row["peer"] == PEER_NOT_RUN or row["ratio_note"] == NO_PEER, (
                f"row {row['name']} has neither a ratio to its peer nor says why: {row}"
            )
            if row["peer"] == PEER_NOT_RUN:
                assert PEER_NOT_RUN in out, "the run does not say that the peer was left out"
        else:
            assert math.isfinite(row["ratio"]) and row["ratio"] > 0, row
        assert row["metric"] and row["command"].startswith("python -m bench"), row
        # the machine was sampled before the row (bench.common.settle): how busy it was is kept
        assert 0.0 <= row["details"]["busy_before"] <= 1.0 and row["details"]["settle_s"] >= 0, row
        if row["name"] == "throughput-ray":
            ours = row["details"]["ours"]
            # a job ran to its end before the clock (bench.throughput.WARMUP_JOBS), what it waited kept
            assert ours["warmup_jobs"] >= 1 and ours["first_running_s"] > 0, ours
            assert ours["latency"]["n"] == ours["jobs"], ours  # and it is not one of the counted jobs
            # each round of ours in a folder of its own, an earlier run's deleted when the row starts
            assert (tmp_path / "bench" / "throughput-round-1" / "console" / "ledger.db").is_file()
            assert not stale_round.exists()
    # the table printed at the end names every row
    for row in rows:
        assert row["metric"][:40] in r.stdout, f"{row['metric']!r} not in the printed table"
