"""`python -m bench.manifest_cost [--runs N]`: what a re-submit by manifest digest no longer does
(docs/benchmarks.md, **packaging**, change 56), on the packaging row's lab, in this process.

- `message`: the manifest message of every file (`cli.pack.to_manifest`), copied into a JobSpec and
  a SubmitJobRequest, then cleared from it, as `sf submit` did before for a lab named by digest.
- `digest`: the manifest digest alone (`cli.pack.manifest_digest`), what it does now.

Alternated; prints the median CPU (`time.process_time`) of each.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from starforge_api.control.v1 import control_service_pb2
from starforge_api.job.v1 import job_spec_pb2

from bench.packaging import ensure_data
from cli.lab import find_lab
from cli.pack import PackedFile, manifest_digest, pack_lab, to_manifest


def _message(files: list[PackedFile]) -> None:
    request = control_service_pb2.SubmitJobRequest(spec=job_spec_pb2.JobSpec(workspace=to_manifest(files)))
    request.spec.ClearField("workspace")


def _digest(files: list[PackedFile]) -> None:
    manifest_digest(files)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.manifest_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40, help="runs of each (default 40)")
    args = parser.parse_args(argv)
    lab = find_lab(ensure_data())
    files = pack_lab(lab.root, lab.settings).files
    cpu: dict[str, list[float]] = {"message": [], "digest": []}
    ways = {"message": _message, "digest": _digest}
    for i in range(args.runs):
        for name in ("message", "digest") if i % 2 else ("digest", "message"):
            t0 = time.process_time()
            ways[name](files)
            cpu[name].append(time.process_time() - t0)
    for name, xs in cpu.items():
        print(f"{name}: CPU median {statistics.median(xs) * 1000:.1f} ms over {len(files)} files", flush=True)
    print(f"load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
