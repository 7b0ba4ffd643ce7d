"""`python -m bench.resubmit_ab [--base REV] [--rounds N] [--resubmits K]`: the packaging row's
re-submit, CPU and wall, this tree against an earlier one, alternated.

Each side gets a console of its own (`sf up` from that tree) and submits the packaging row's lab
once (the hash cache is kept between sides, so only the upload is repeated), then `K` re-submits
of the unchanged lab. Per re-submit: wall (process start to exit), the client's CPU (`getrusage`
of the waited-for `sf` and the git it waits for) and the console's (`/proc/<pid>/stat` of the
console and its executor, before and after: its scheduler cycles included). The tree a side runs
is chosen by PYTHONPATH for the console and `sf` only; this driver's own code is this tree's.
Prints each round and the medians. Without `--base`: one side, this tree (profiling).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import time

from bench.ab import base_tree
from bench.common import REPO, cpu_seconds_of, fresh_dir, log
from bench.console import SF, running_console
from bench.packaging import drain, ensure_data, make_lab


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def prepare_lab(env: dict[str, str]) -> pathlib.Path:
    """The packaging row's lab, initialised and committed once (kept between sides)."""
    lab = ensure_data()
    if (lab / ".git").is_dir() and (lab / "experiments" / "exp" / "config.yaml").is_file():
        return lab
    make_lab(lab, env)
    return lab


def measure_side(tree: pathlib.Path, resubmits: int, profile: str = "") -> dict[str, list[float]]:
    pythonpath = os.pathsep.join([str(tree), str(tree / "gen" / "python"), str(tree / "gen" / "pure")])
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = pythonpath
    try:
        with running_console(fresh_dir("resubmit-ab") / "console") as console:
            env = console.env()

            drain(console)
            lab = prepare_lab(env)
            (lab / ".starforge" / "cache" / "admitted.json").unlink(missing_ok=True)
            cmd = [str(SF), "submit", "exp", "-o", "json"]
            subprocess.run(cmd, cwd=lab, env=env, capture_output=True, text=True, check=True)
            out: dict[str, list[float]] = {"wall": [], "client": [], "console": []}
            for i in range(resubmits):
                run = cmd
                if profile and i == resubmits - 1:
                    run = [sys.executable, "-m", "cProfile", "-o", profile, str(SF), *cmd[1:]]
                time.sleep(0.3)  # let the console's scheduler cycle settle between runs
                c0, k0, t0 = _children_cpu(), cpu_seconds_of(console.pids()), time.monotonic()
                r = subprocess.run(run, cwd=lab, env=env, capture_output=True, text=True, check=True)
                wall = time.monotonic() - t0
                out["wall"].append(wall)
                out["client"].append(_children_cpu() - c0)
                out["console"].append(cpu_seconds_of(console.pids()) - k0)
                upload = json.loads(r.stdout)["upload"]
                if upload.get("bytes_uploaded", 0):
                    raise RuntimeError(f"a re-submit uploaded bytes: {upload}")
            return out
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def _line(side: str, m: dict[str, list[float]]) -> str:
    cpu = [a + b for a, b in zip(m["client"], m["console"], strict=True)]
    return (
        f"{side}: wall {_median(m['wall']) * 1000:.0f} ms, CPU {_median(cpu) * 1000:.0f} ms "
        f"(client {_median(m['client']) * 1000:.0f}, console {_median(m['console']) * 1000:.0f})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.resubmit_ab", description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="", help="the earlier revision (a commit, tag or branch)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    parser.add_argument("--resubmits", type=int, default=3, help="re-submits per side and round (default 3)")
    parser.add_argument("--profile", default="", help="cProfile the last re-submit of this tree into this file")
    args = parser.parse_args(argv)
    sides = [("this", REPO)] + ([("base", base_tree(args.base, parser.prog))] if args.base else [])
    totals: dict[str, dict[str, list[float]]] = {s: {"wall": [], "client": [], "console": []} for s, _ in sides}
    for n in range(args.rounds):
        order = sides if n % 2 else list(reversed(sides))
        for side, tree in order:
            m = measure_side(tree, args.resubmits, args.profile if side == "this" else "")
            for k, v in m.items():
                totals[side][k] += v
            log(f"round {n + 1} {_line(side, m)} load {os.getloadavg()[0]:.1f}")
    for side, _ in sides:
        print(f"medians over {args.rounds} rounds x {args.resubmits}: {_line(side, totals[side])}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
