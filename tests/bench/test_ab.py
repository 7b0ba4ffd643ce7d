"""`python -m bench.ab` (`make bench-ab`) works: it refuses what it cannot measure with one message,
and it runs a row alternately from an earlier tree and from this one and prints each round and
the median ratio. The row runs in quick mode (STARFORGE_BENCH_QUICK=1); no timing is asserted,
only that every figure came out and that the exit status says what the ratio says.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

from bench import ab

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _ab(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.ab", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_a_base_that_names_no_commit_is_one_message_and_no_worktree() -> None:
    before = sorted(ab.WORK.iterdir()) if ab.WORK.is_dir() else []
    r = _ab("--base", "no-such-revision-of-starforge", "ingest")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "python -m bench.ab: --base 'no-such-revision-of-starforge' names no commit of this repository"
    ]
    assert (sorted(ab.WORK.iterdir()) if ab.WORK.is_dir() else []) == before


def test_no_rows_means_every_row_and_an_unknown_row_is_refused_first() -> None:
    # no row named: the command gets as far as the base (argparse once refused it outright)
    r = _ab("--base", "no-such-revision-of-starforge")
    assert r.returncode == 1
    assert "names no commit of this repository" in r.stderr
    before = sorted(ab.WORK.iterdir()) if ab.WORK.is_dir() else []
    r = _ab("--base", "HEAD", "ingest", "no-such-row")
    assert r.returncode == 2
    assert "argument rows: invalid choice: 'no-such-row'" in r.stderr
    assert (sorted(ab.WORK.iterdir()) if ab.WORK.is_dir() else []) == before


def test_another_command_names_itself_when_its_base_names_no_commit() -> None:
    with pytest.raises(SystemExit) as exc:
        ab.base_tree("no-such-revision-of-starforge", "python -m bench.zygote_ab")
    assert str(exc.value) == (
        "python -m bench.zygote_ab: --base 'no-such-revision-of-starforge' names no commit of this repository"
    )


def test_rounds_below_one_are_refused_before_anything_is_checked_out() -> None:
    r = _ab("--base", "HEAD", "--rounds", "0", "ingest")
    assert r.returncode == 2
    assert "--rounds must be at least 1 (got 0)" in r.stderr


def test_figure_follows_a_dotted_path() -> None:
    assert ab.figure({"latency": {"p99": 0.25}, "per_s": 3}, "latency.p99") == 0.25
    assert ab.figure({"latency": {"p99": 0.25}, "per_s": 3}, "per_s") == 3.0
    with pytest.raises(KeyError):
        ab.figure({"latency": {}}, "latency.p99")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_row_runs_alternately_from_the_base_tree_and_this_one() -> None:
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    tree = ab.WORK / head[:12]
    made_here = not tree.exists()
    env = {k: v for k, v in os.environ.items() if k not in ("STARFORGE_BENCH_PEERS", "STARFORGE_BENCH_WORK")}
    env["STARFORGE_BENCH_QUICK"] = "1"
    try:
        r = _ab("--base", "HEAD", "--rounds", "1", "ingest", env=env, timeout=800)
        assert r.returncode in (0, 1), r.stdout[-2000:] + r.stderr[-3000:]
        out = r.stdout
        for side in ("base", "this"):
            assert re.search(rf"^ingest round 1 {side}: [0-9,]+\.[0-9]{{3}} per_s$", out, re.M), out
        summary = re.search(
            r"^ingest: this tree median ([0-9,.]+), base HEAD median ([0-9,.]+): ratio ([0-9.]+) \(>= 1: no slower\)$",
            out,
            re.M,
        )
        assert summary, out
        ours, base, ratio = (float(summary.group(i).replace(",", "")) for i in (1, 2, 3))
        assert ours > 0 and base > 0
        assert ratio == pytest.approx(ours / base, abs=0.01)
        # the exit status is the harness's verdict: 1 when the row got more than 10 % slower
        assert r.returncode == (1 if ours / base < 0.9 else 0)
        assert (tree / "bench" / "ab.py").is_file()  # the base tree, checked out by git
        assert not (ab.WORK / "work").exists()  # each measurement's folder is gone with the run
    finally:
        if made_here:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
            subprocess.run(["git", "worktree", "prune"], cwd=ROOT, check=False)
