"""`python -m bench.packaging_cpu [--rounds N] [--py-spy DIR]`: the CPU of the first `sf submit` of the
packaging lab (bench/packaging.py), both sides.

Each round starts a fresh console, makes the lab a fresh workspace (as the packaging row does) and
runs `sf submit exp -o json` once: its wall time, `sf`'s CPU (user + system from getrusage of the
child) and the console's CPU over the submit (utime + stime of the console and its executor, from
/proc/<pid>/stat). CPU time is what a shared machine measures best; wall is printed beside it.
`measure_ours()` is one round, for `python -m bench.ab packaging_cpu`.

`STARFORGE_BENCH_CONSOLE_CPUS` pins the console, `STARFORGE_BENCH_LOADGEN_CPUS` pins `sf` (taskset; see
"Pinning to N cores" in docs/benchmarks.md).

`--py-spy DIR`: record the console with py-spy (`--native`) during the submit and profile `sf` with
cProfile, into DIR (one round).
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

from bench.common import CONSOLE_CPUS, LOADGEN_CPUS, cpu_seconds_of, fresh_dir, log, pinned_command
from bench.console import SF, running_console
from bench.packaging import drain, ensure_data, lab_bytes, make_lab


def measure_ours(profile: pathlib.Path | None = None) -> dict[str, float]:
    lab = ensure_data()
    work = fresh_dir("packaging-cpu")
    with running_console(work / "console") as console:
        make_lab(lab, console.env())
        drain(console)
        time.sleep(1.0)  # let the console settle after start-up
        pids = console.pids()
        cmd = [str(SF), "submit", "exp", "-o", "json"]
        spy = None
        if profile is not None:
            profile.mkdir(parents=True, exist_ok=True)
            cmd = [sys.executable, "-m", "cProfile", "-o", str(profile / "sf.prof"), *cmd]
            spy_bin = pathlib.Path(sys.executable).parent / "py-spy"
            spy = subprocess.Popen(
                [str(spy_bin), "record", "--native", "--threads", "-r", "200", "-f", "speedscope",
                 "-o", str(profile / "console.json"), "-p", str(pids[0])],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            time.sleep(1.0)
        c0, r0, t0 = cpu_seconds_of(pids), resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
        proc = subprocess.run(
            pinned_command(cmd, LOADGEN_CPUS), cwd=lab, env=console.env(), capture_output=True, text=True, check=True
        )
        wall = time.monotonic() - t0
        r1, c1 = resource.getrusage(resource.RUSAGE_CHILDREN), cpu_seconds_of(pids)
        if spy is not None:
            spy.send_signal(2)
            spy.wait(60)
        upload = json.loads(proc.stdout)["upload"]
    _, size = lab_bytes(lab)
    sf_cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return {
        "first_s": wall,
        "first_mb_s": size / 1e6 / wall,
        "sf_cpu_s": sf_cpu,
        "console_cpu_s": c1 - c0,
        "cpu_s": sf_cpu + c1 - c0,
        "bytes_uploaded": float(upload.get("bytes_uploaded", 0)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.packaging_cpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--py-spy", type=pathlib.Path, default=None, help="profile both sides into this folder")
    args = parser.parse_args(argv)
    rows = []
    pins = f", console CPUs {CONSOLE_CPUS}" if CONSOLE_CPUS else ""
    pins += f", sf CPUs {LOADGEN_CPUS}" if LOADGEN_CPUS else ""
    for n in range(args.rounds):
        r = measure_ours(args.py_spy)
        rows.append(r)
        load = os.getloadavg()[0]
        log(
            f"round {n + 1}: wall {r['first_s']:.2f} s ({r['first_mb_s']:.1f} MB/s), sf CPU {r['sf_cpu_s']:.2f} s, "
            f"console CPU {r['console_cpu_s']:.2f} s, load {load:.1f}{pins}"
        )
    if len(rows) > 1:
        med = {k: statistics.median(r[k] for r in rows) for k in ("first_s", "sf_cpu_s", "console_cpu_s")}
        log(
            f"median: wall {med['first_s']:.2f} s, sf CPU {med['sf_cpu_s']:.2f} s, console {med['console_cpu_s']:.2f} s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
