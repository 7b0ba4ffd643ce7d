"""`python -m bench.ab [--base REV] [--rounds N] [ROW ...]`: this tree against an earlier one, in one run.

A change that must not make a row slower (admission, ingest) is measured A/B: the earlier revision
(`--base`) is checked out into build/bench-ab/<rev> with `git worktree add`, and our side of each row
runs alternately from that tree and from this one, `--rounds` times, on the same machine in the
same minutes. Each side runs its own code: the base tree's modules come first on PYTHONPATH, so its
console (`sf up`, started by the row) is the base's too. Only our side is measured (no peers):
the question is "did we get slower", and alternating rounds cancels most of the drift of a shared
machine. Prints each round and the median ratio (this tree / base; higher is better).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
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
PROBE = """
import json, sys
from {module} import measure_ours
print("AB-RESULT " + json.dumps(measure_ours()))
"""


def base_tree(rev: str) -> pathlib.Path:
    """A checkout of `rev` (made once, reused)."""
    sha = subprocess.run(["git", "rev-parse", rev], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    tree = WORK / sha[:12]
    if not (tree / "bench").is_dir():
        WORK.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "worktree", "add", "--detach", "--force", str(tree), sha], cwd=REPO, check=True)
    return tree


def figure(result: dict[str, Any], key: str) -> float:
    """The figure at `key`, a dotted path (`latency.p99`)."""
    value: Any = result
    for part in key.split("."):
        value = value[part]
    return float(value)


def measure(tree: pathlib.Path, module: str) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree), str(tree / "gen" / "python"), str(tree / "gen" / "pure")])
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
    parser.add_argument("rows", nargs="*", default=list(ROWS), choices=list(ROWS))
    parser.add_argument("--base", required=True, help="the earlier revision (a commit, tag or branch)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per row (default 3)")
    args = parser.parse_args(argv)
    base = base_tree(args.base)
    failed = False
    for row in args.rows:
        module, key, higher_is_better = ROWS[row]
        ours: list[float] = []
        theirs: list[float] = []
        for n in range(args.rounds):
            # alternate which side goes first, so a drifting machine favours neither
            order = [("base", base), ("this", REPO)] if n % 2 == 0 else [("this", REPO), ("base", base)]
            for side, tree in order:
                value = figure(measure(tree, module), key)
                (ours if side == "this" else theirs).append(value)
                print(f"{row} round {n + 1} {side}: {value:,.3f} {key}", flush=True)
        ratio = statistics.median(ours) / statistics.median(theirs)
        if not higher_is_better:  # a latency: the ratio is base / this, so that >= 1 still means no slower
            ratio = 1 / ratio
        print(
            f"{row}: this tree median {statistics.median(ours):,.3f}, base {args.base} median "
            f"{statistics.median(theirs):,.3f}: ratio {ratio:.2f} (>= 1: no slower)",
            flush=True,
        )
        failed |= ratio < 0.9
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
