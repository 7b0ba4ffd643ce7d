"""CPU of a capsule start, without a console: `python -m bench.capsule_cpu [--tree DIR] [--starts N]`.

The capsule row measures wall time, which a loaded machine stretches by its load; this measures
the CPU the start costs, which the load hardly moves, so two trees can be compared in alternated
runs. A tree's build/capsule is laid out as an executor would (capsule.json, workspace), a runner
venv is installed once for it as the process runtime does (executor_svc/local/pex_warm.py), and
`sh bootstrap.sh` runs N times (after one warm-up) against the capsule tests' IngestService, as
root, with train.sh as its training command. Per start: wall time from the spawn to train.sh's
first instruction; the CPU of the runner process up to that instruction (its utime + stime, read
by train.sh from /proc/$PPID/stat: with a one-interpreter bootstrap that is everything before the
command; processes it waited for are not in it); and the CPU of the whole attempt (every process
of it, the shutdown included: RUSAGE_CHILDREN). Prints the medians. `--tree` is the checkout whose
capsule, layout code and executor code are used (default: this one).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import resource
import shutil
import statistics
import sys
import tempfile
import time

TRAIN_SH = (
    "#!/bin/bash\n"
    'printf %s "$EPOCHREALTIME" > "$FORGE_OUT_DIR/first"\n'
    'read -r s < /proc/$PPID/stat; printf %s "$s" > "$FORGE_OUT_DIR/parent-stat"\n'
    "true\n"
)
PATH = "/usr/bin:/bin"


def _cpu_of_stat(text: str) -> float:
    fields = text.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _read_start(out_dir: pathlib.Path, spawned_at: float) -> tuple[float, float]:
    """(wall from the spawn to train.sh's first instruction, the runner's CPU up to it)."""
    first = float((out_dir / "first").read_text())
    return first - spawned_at, _cpu_of_stat((out_dir / "parent-stat").read_text())


async def _measure(tree: pathlib.Path, starts: int) -> dict[str, float]:
    from capsule.layout import load_manifest
    from executor_svc.local.pex_warm import SharedPex
    from tests.integration.capsule.fake_ingest import FakeIngest
    from tests.integration.capsule.harness import TOKEN, lay_out, run_capsule

    manifest = load_manifest(tree / "build" / "capsule")
    work = pathlib.Path(tempfile.mkdtemp(prefix="sf-capsule-cpu-"))
    os.chmod(work, 0o755)
    try:
        os.mkdir(work / "state")
        shared = SharedPex(work / "state")
        walls: list[float] = []
        before: list[float] = []
        whole: list[float] = []
        for i in range(starts + 1):
            ingest = FakeIngest(token=TOKEN, attempt_id="jtest0000000001.1")
            await ingest.start()
            try:
                root = work / f"attempt-{i}"
                os.mkdir(root)
                launch = lay_out(root, manifest, {"experiments/demo/train.sh": TRAIN_SH}, ingest_addr=ingest.address)
                launch.env.update(PATH=PATH, PEX_ROOT=str(launch.scratch_dir / ".pex"))
                launch.env.update(await shared.env_for(launch.capsule_dir, {"PATH": PATH}, {}))
                r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                t0 = time.time()
                result = await run_capsule(launch)
                r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            finally:
                await ingest.stop()
            if result.returncode != 0:
                raise RuntimeError(f"the capsule exited {result.returncode}: {result.stderr[-2000:]}")
            if i == 0:
                continue  # warm-up: page cache, the runner venv's first use
            wall, cpu = _read_start(launch.out_dir, t0)
            walls.append(wall)
            before.append(cpu)
            whole.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
        return {
            "wall_to_first_s": statistics.median(walls),
            "cpu_to_first_s": statistics.median(before),
            "cpu_per_attempt_s": statistics.median(whole),
            "load": os.getloadavg()[0],
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.capsule_cpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=pathlib.Path, default=pathlib.Path(__file__).resolve().parents[1])
    parser.add_argument("--starts", type=int, default=10)
    args = parser.parse_args(argv)
    tree = args.tree.resolve()
    sys.path[:0] = [str(tree), str(tree / "gen" / "python"), str(tree / "gen" / "pure")]
    out = asyncio.run(_measure(tree, args.starts))
    print(
        f"{tree}: spawn -> first instruction p50 {out['wall_to_first_s'] * 1000:.0f} ms, "
        f"CPU before it {out['cpu_to_first_s']:.3f} s, CPU per attempt {out['cpu_per_attempt_s']:.3f} s "
        f"(medians of {args.starts}; 1-minute load {out['load']:.1f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
