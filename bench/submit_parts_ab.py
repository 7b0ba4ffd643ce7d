"""`python -m bench.submit_parts_ab --base REV [--runs N]`: two parts of `sf submit`'s client CPU,
this tree against an earlier one, alternated.

- `git`: `cli.gitinfo.read_state` on the packaging row's lab, both trees' versions in this one
  process (the base's module loaded from its file), CPU of this process and of the git it waits for.
- `imports`: `import cli.fastpath, cli.commands.submit` (what `sf submit`'s fast path loads before
  it runs) in a fresh interpreter whose PYTHONPATH names the tree, started outside both trees so
  that the current folder does not shadow it; CPU from `getrusage` of the waited-for child.

The resubmit row (`bench.resubmit_ab`) measures the whole re-submit; these parts are smaller than
its spread on a shared machine. Prints the median (and the lower quartile) of each side.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from types import ModuleType

from bench.ab import base_tree
from bench.common import REPO
from bench.packaging import ensure_data
from cli import gitinfo


def _self_and_children_cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _children_cpu() -> float:
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return kids.ru_utime + kids.ru_stime


def _load_gitinfo(tree: pathlib.Path) -> ModuleType:
    name = "bench_base_gitinfo"
    spec = importlib.util.spec_from_file_location(name, tree / "cli" / "gitinfo.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _imports(tree: pathlib.Path, cwd: str) -> Callable[[], object]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tree), str(tree / "gen" / "python"), str(tree / "gen" / "pure")]),
    }
    cmd = [sys.executable, "-c", "import cli.fastpath, cli.commands.submit"]
    return lambda: subprocess.run(cmd, env=env, cwd=cwd, check=True)


def _summary(xs: list[float]) -> str:
    q1 = statistics.quantiles(xs)[0] if len(xs) > 1 else xs[0]
    return f"median {statistics.median(xs) * 1000:.1f} ms (lower quartile {q1 * 1000:.1f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.submit_parts_ab", description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the earlier revision (a commit, tag or branch)")
    parser.add_argument("--runs", type=int, default=30, help="runs per side and part (default 30)")
    args = parser.parse_args(argv)
    base = base_tree(args.base, parser.prog)
    lab = ensure_data()
    if not (lab / ".git").is_dir():
        raise SystemExit(f"{lab} is not a committed lab yet: run `python -m bench.resubmit_ab` once")
    old = _load_gitinfo(base)
    if dataclasses.astuple(old.read_state(lab)) != dataclasses.astuple(gitinfo.read_state(lab)):
        raise SystemExit("the two trees read different git states")
    neutral = tempfile.mkdtemp(prefix="submit-parts-")
    parts: dict[str, dict[str, Callable[[], object]]] = {
        "git": {"base": lambda: old.read_state(lab), "this": lambda: gitinfo.read_state(lab)},
        "imports": {"base": _imports(base, neutral), "this": _imports(REPO, neutral)},
    }
    clocks = {"git": _self_and_children_cpu, "imports": _children_cpu}
    cpu: dict[tuple[str, str], list[float]] = {(p, s): [] for p in parts for s in ("base", "this")}
    wall: dict[tuple[str, str], list[float]] = {(p, s): [] for p in parts for s in ("base", "this")}
    for i in range(args.runs):
        for part, sides in parts.items():
            for side in ("base", "this") if i % 2 else ("this", "base"):
                clock = clocks[part]
                c0, t0 = clock(), time.monotonic()
                sides[side]()
                cpu[(part, side)].append(clock() - c0)
                wall[(part, side)].append(time.monotonic() - t0)
    for part in parts:
        for side in ("base", "this"):
            print(
                f"{part} {side}: CPU {_summary(cpu[(part, side)])}, wall median "
                f"{statistics.median(wall[(part, side)]) * 1000:.1f} ms",
                flush=True,
            )
    print(f"load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
