"""`python -m bench.cli_ab [--rounds N] [--no-bytecode] REV ...`: `sf job ls` and `sf job status <id>`
of earlier trees and this one, alternated, against one warm console (the **cli** row's CPU A/B).

The **cli** row times one tree; a change of a few ms of CPU needs its tree and the one before in
the same minutes. Each REV is exported (`git archive`, no worktree) into build/bench-ab-cli/<sha>;
every side, this tree among them, runs `cli.main` with this interpreter and its own tree first on
PYTHONPATH, so all pay the same path lookups. One warm console (`sf up` of this tree, 20 queued
jobs, as `bench.cli_latency`) serves them all; each round runs every side once per command, the
order rotating. Per run: CPU (user + system of the waited-for child, getrusage) and wall time;
printed: medians and minimums per side and command, and the median of the per-round differences
from the side before it (runs of one round are seconds apart, so that difference drifts least with a
shared machine's load). Bytecode is cached under the run's own PYTHONPYCACHEPREFIX, written in the
warm-up (as an install has it; the **cli** row byte-compiles the tree for the same reason).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tarfile

from bench.cli_latency import _queue_jobs
from bench.cli_latency import _timed as timed
from bench.common import REPO, fresh_dir
from bench.console import running_console

WORK = REPO / "build" / "bench-ab-cli"
SF = "import sys; from cli.main import main; sys.exit(main())"


def export(rev: str) -> tuple[str, pathlib.Path]:
    """`rev` as (short sha, a tree of its files), exported once and reused."""
    sha = subprocess.run(["git", "rev-parse", rev], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    tree = WORK / sha[:12]
    if not (tree / "cli").is_dir():
        archive = subprocess.run(["git", "archive", sha], cwd=REPO, capture_output=True, check=True).stdout
        shutil.rmtree(tree, ignore_errors=True)
        tree.mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tree, filter="data")
    return sha[:8], tree


def _path(tree: pathlib.Path) -> str:
    return os.pathsep.join([str(tree), str(tree / "gen" / "python"), str(tree / "gen" / "pure")])


def _paired(first: list[tuple[float, float]] | None, side: list[tuple[float, float]]) -> str:
    """`side` - `first`, the median of the per-round differences of CPU and wall ("" without `first`)."""
    if first is None:
        return ""
    cpu = statistics.median(b[1] - a[1] for a, b in zip(first, side, strict=True)) * 1000
    wall = statistics.median(b[0] - a[0] for a, b in zip(first, side, strict=True)) * 1000
    return f"; paired: CPU {cpu:+.1f} ms, wall {wall:+.1f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cli_ab", description=__doc__.split("\n\n")[0])
    parser.add_argument("revs", nargs="*", help="earlier revisions (commits, tags, branches); this tree is one side")
    parser.add_argument("--rounds", type=int, default=10, help="alternated rounds (default 10)")
    args = parser.parse_args(argv)
    sides = [export(rev) for rev in args.revs] + [("this", REPO)]
    work = fresh_dir("cli-ab-run")
    with running_console(work / "console") as console:
        job_id = asyncio.run(_queue_jobs(console))
        env = {
            k: v
            for k, v in console.env().items()
            if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "PYTHONPROFILEIMPORTTIME")
        }
        env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")  # empty: every side's bytecode written alike
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        commands = {"job ls": ["job", "ls"], f"job status {job_id}": ["job", "status", job_id]}
        runs: dict[tuple[str, str], list[tuple[float, float]]] = {(s, c): [] for s, _ in sides for c in commands}
        for _, tree in sides:  # warm-up: page cache, bytecode, the console's first call
            for command in commands.values():
                timed([sys.executable, "-c", SF, *command], {**env, "PYTHONPATH": _path(tree)}, work)
        load = os.getloadavg()[0]
        for n in range(args.rounds):
            order = sides[n % len(sides) :] + sides[: n % len(sides)]
            for label, command in commands.items():
                for name, tree in order:
                    env_side = {**env, "PYTHONPATH": _path(tree)}
                    runs[(name, label)].append(timed([sys.executable, "-c", SF, *command], env_side, work))
    print(f"{args.rounds} alternated rounds, 1-minute load {load:.1f} -> {os.getloadavg()[0]:.1f}")
    for label in commands:
        for i, (name, _) in enumerate(sides):
            before = runs[(sides[i - 1][0], label)] if i else None
            wall = [w for w, _ in runs[(name, label)]]
            cpu = [c for _, c in runs[(name, label)]]
            command_name = " ".join(label.split()[:2])
            print(
                f"sf {command_name:10} {name:8} CPU median {statistics.median(cpu) * 1000:6.1f} ms"
                f" (min {min(cpu) * 1000:6.1f}), wall median {statistics.median(wall) * 1000:6.1f} ms"
                f" (min {min(wall) * 1000:6.1f})" + _paired(before, runs[(name, label)])
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
