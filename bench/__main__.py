"""`python -m bench [NAME ...]`: run the benchmarks (all by default) and print the table.

Names: submit, capsule, admission, queue, ingest, log-follow, packaging, cli, throughput, followers,
web. Results also go to
build/bench/results.json and, as the Markdown rows of docs/benchmarks.md, to build/bench/results.md.
STARFORGE_BENCH_QUICK=1 runs smaller variants (for trying the harness, not for the table).
"""

from __future__ import annotations

import argparse
import importlib
import json
import pathlib
import signal
import sys
import time
import traceback
from collections.abc import Callable

from bench.common import (
    NO_PEER,
    QUICK,
    SOURCE_TREES,
    WORK,
    Result,
    compile_sources,
    log,
    machine,
    pinning,
    settle,
)

MODULES = {
    "submit": "bench.submit",
    "capsule": "bench.capsule",
    "log-follow": "bench.log_follow",
    "packaging": "bench.packaging",
    "admission": "bench.admission",
    "ingest": "bench.ingest",
    "queue": "bench.queue_scale",
    "cli": "bench.cli_latency",
    "throughput": "bench.throughput",
    "followers": "bench.followers",
    "web": "bench.web_scale",
}


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "s":
        if value < 0.01:
            return f"{value * 1000:.2f} ms"
        return f"{value * 1000:.0f} ms" if value < 10 else f"{value:.1f} s"
    if value >= 100:
        return f"{value:,.0f} {unit}"
    return f"{value:.2f} {unit}"


def _ratio(r: Result) -> str:
    if r.ratio is None:
        return "—"
    return f"{r.ratio:,.0f}x ({r.ratio_note})" if r.ratio >= 100 else f"{r.ratio:.2f}x ({r.ratio_note})"


def table(results: list[Result], fmt: str = "text") -> str:
    head = ["benchmark", "ours", "peer", "peer figure", "ratio", "target", "met?"]
    rows = [
        [
            r.metric,
            _fmt(r.figure, r.unit),
            r.peer or "—",
            _fmt(r.peer_figure, r.unit),
            _ratio(r),
            r.target,
            {True: "yes", False: "**no**" if fmt == "md" else "NO", None: "—"}[r.met],
        ]
        for r in results
    ]
    if fmt == "md":
        lines = ["| " + " | ".join(head) + " | command |", "|" + "---|" * (len(head) + 1)]
        lines += ["| " + " | ".join(row) + f" | `{r.command}` |" for row, r in zip(rows, results, strict=True)]
        return "\n".join(lines)
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(head)]
    out = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))]
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help=", ".join(MODULES))
    parser.add_argument("--render", metavar="JSON", help="print the tables of an earlier run's results.json")
    args = parser.parse_args(argv)
    if args.render:
        doc = json.loads(pathlib.Path(args.render).read_text())
        rows = [Result(**r) for r in doc["results"]]
        print(table(rows, "md"))
        print()
        print(table(rows))
        return 0
    # SIGTERM unwinds like Ctrl-C, so every console and peer started so far is stopped by its PID.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    names = args.names or list(MODULES)
    unknown = [n for n in names if n not in MODULES]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(MODULES)}")
    WORK.mkdir(parents=True, exist_ok=True)
    compiled = compile_sources()
    log(f"byte-compiled the project's packages ({compiled}/{len(SOURCE_TREES)} trees), as an install has them")
    before = machine()
    log(f"machine: {before}{' (QUICK variants)' if QUICK else ''}")
    started = time.monotonic()
    results: list[Result] = []
    failed: list[str] = []
    for name in names:
        run: Callable[[], list[Result]] = importlib.import_module(MODULES[name]).run
        settled = settle()
        if settled["settle_s"] >= 3:
            log(f"{name}: waited {settled['settle_s']:.0f} s for a quiet machine (busy {settled['busy_before']:.0%})")
        t0 = time.monotonic()
        try:
            rows = run()
        except Exception:
            traceback.print_exc()
            failed.append(name)
            continue
        for r in rows:
            if not r.peer and r.ratio is None and not r.ratio_note:
                r.ratio_note = NO_PEER
            r.details.update(settled)
            r.details["load_after"] = machine()["load"]
            r.details.update(pinning())
            r.details["seconds"] = round(time.monotonic() - t0, 1)
        results.extend(rows)
    after = machine()
    doc = {
        "machine": before,
        "load_after": after["load"],
        "seconds": round(time.monotonic() - started),
        "quick": QUICK,
        "results": [r.as_dict() for r in results],
        "failed": failed,
    }
    (WORK / "results.json").write_text(json.dumps(doc, indent=2, default=str))
    (WORK / "results.md").write_text(table(results, "md") + "\n")
    print()
    print(table(results))
    print(
        f"\nmachine: {before['nproc']} CPUs ({before['cpu']}), {before['mem_gib']} GiB RAM, load "
        f"{before['load']} before / {after['load']} after; {doc['seconds']} s; details: {WORK / 'results.json'}"
    )
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
