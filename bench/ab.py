"""`python -m bench.ab [--base REV] [--rounds N] [ROW ...]`: this tree against an earlier one, in one run.

A change that must not make a row slower (admission, ingest) is measured A/B: the earlier revision
(`--base`) is checked out into build/bench-ab/<rev> with `git worktree add`, and our side of each row
runs alternately from that tree and from this one, `--rounds` times, on the same machine in the
same minutes. Each side runs its own code: the base tree's modules come first on PYTHONPATH, so its
console (`sf up`, started by the row) is the base's too. Only our side is measured (no peers):
the question is "did we get slower", and alternating rounds cancels most of the drift of a shared
machine. Prints each round and the median ratio (this tree / base; higher is better).

Each measurement works in a folder of its own (`STARFORGE_BENCH_WORK` = build/bench-ab/work/
<row>-<round>-<side>), deleted when the run ends, so that no side starts right after deleting the
other side's last round: on ext4 without a journal that deletion made every file the next round
created cost up to 0.4 ms of kernel CPU (docs/benchmarks.md, throughput, change 86).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[1]
WORK = REPO / "build" / "bench-ab"

# row -> (module, the figure to compare (a dotted path into the result), whether higher is better)
ROWS = {
    "admission": ("bench.admission", "per_s", True),
    "ingest": ("bench.ingest", "per_s", True),
    "throughput": ("bench.throughput", "per_s", True),  # STARFORGE_BENCH_E2E_JOBS=48 for a short run
    # the p99 line latency, seconds; STARFORGE_BENCH_FOLLOWERS=5000 for a shorter run
    "followers": ("bench.followers", "latency.p99", False),
}
# row -> the CPU it cost, a dotted path into the result (seconds; lower is better): the work the
# figure above took, which moves far less from round to round than a rate on a shared machine
CPU = {"throughput": "cpu_s.control_with_children"}
PROBE = """
import json, sys
from {module} import measure_ours
print("AB-RESULT " + json.dumps(measure_ours()))
"""


def base_tree(rev: str, prog: str = "python -m bench.ab") -> pathlib.Path:
    """A checkout of `rev` (made once, reused); a `rev` that names no commit ends the command
    `prog` with one message."""
    found = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        raise SystemExit(f"{prog}: --base {rev!r} names no commit of this repository")
    sha = found.stdout.strip()
    tree = WORK / sha[:12]
    if not (tree / "bench").is_dir():
        WORK.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "worktree", "add", "--detach", "--force", str(tree), sha], cwd=REPO, check=True)
    return tree


def tree_pythonpath(tree: pathlib.Path) -> str:
    """PYTHONPATH that runs `tree`'s own code (its modules and generated messages first)."""
    return os.pathsep.join([str(tree), str(tree / "gen" / "python"), str(tree / "gen" / "pure")])


def figure(result: dict[str, Any], key: str) -> float:
    """The figure at `key`, a dotted path (`latency.p99`)."""
    value: Any = result
    for part in key.split("."):
        value = value[part]
    return float(value)


def measure(tree: pathlib.Path, module: str, work: pathlib.Path) -> dict[str, Any]:
    """One measurement of our side of `module`'s row, `tree`'s code, in the work folder `work`."""
    env = dict(os.environ)
    env["PYTHONPATH"] = tree_pythonpath(tree)
    env["STARFORGE_BENCH_WORK"] = str(work)
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("AB-RESULT "):
            result: dict[str, Any] = json.loads(line.removeprefix("AB-RESULT "))
            return result
    raise RuntimeError(f"{module} in {tree} printed no result (exit {proc.returncode}):\n{proc.stderr[-3000:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.split("\n\n")[0])
    # rows are checked below, not with `choices`: argparse checks a `*` positional that got no
    # value against its choices as one value, so `--base REV` alone was refused
    parser.add_argument("rows", nargs="*", help=f"rows to measure: {', '.join(ROWS)} (default: all)")
    parser.add_argument("--base", required=True, help="the earlier revision (a commit, tag or branch)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per row (default 3)")
    args = parser.parse_args(argv)
    for row in args.rows:
        if row not in ROWS:
            parser.error(f"argument rows: invalid choice: {row!r} (choose from {', '.join(map(repr, ROWS))})")
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1 (got {args.rounds})")
    base = base_tree(args.base)
    shutil.rmtree(WORK / "work", ignore_errors=True)  # an earlier run's, if it was interrupted
    try:
        return 1 if _rounds(args.rows or list(ROWS), args.rounds, args.base, base) else 0
    finally:
        shutil.rmtree(WORK / "work", ignore_errors=True)


def _rounds(rows: list[str], rounds: int, base_rev: str, base: pathlib.Path) -> bool:
    """Every row's alternated rounds, printed as they come; True when a row got slower."""
    failed = False
    for row in rows:
        module, key, higher_is_better = ROWS[row]
        ours: list[float] = []
        theirs: list[float] = []
        cpu: dict[str, list[float]] = {"this": [], "base": []}
        for n in range(rounds):
            # alternate which side goes first, so a drifting machine favours neither
            order = [("base", base), ("this", REPO)] if n % 2 == 0 else [("this", REPO), ("base", base)]
            for side, tree in order:
                result = measure(tree, module, WORK / "work" / f"{row}-{n + 1}-{side}")
                value = figure(result, key)
                (ours if side == "this" else theirs).append(value)
                spent = ""
                if row in CPU:
                    cpu[side].append(figure(result, CPU[row]))
                    spent = f" ({cpu[side][-1]:,.1f} CPU-s, {CPU[row]})"
                print(f"{row} round {n + 1} {side}: {value:,.3f} {key}{spent}", flush=True)
        ratio = statistics.median(ours) / statistics.median(theirs)
        if not higher_is_better:  # a latency: the ratio is base / this, so that >= 1 still means no slower
            ratio = 1 / ratio
        print(
            f"{row}: this tree median {statistics.median(ours):,.3f}, base {base_rev} median "
            f"{statistics.median(theirs):,.3f}: ratio {ratio:.2f} (>= 1: no slower)",
            flush=True,
        )
        if row in CPU:
            this_cpu, base_cpu = statistics.median(cpu["this"]), statistics.median(cpu["base"])
            print(
                f"{row}: CPU ({CPU[row]}) this tree median {this_cpu:,.1f} s, base {base_cpu:,.1f} s: "
                f"{this_cpu / base_cpu:.3f} of the base's",
                flush=True,
            )
        failed |= ratio < 0.9
    return failed


if __name__ == "__main__":
    raise SystemExit(main())
