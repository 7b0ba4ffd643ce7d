"""Capsule overhead: from the process start of an attempt (the local executor's process runtime
spawning `sh bootstrap.sh`) to the first instruction of the training command (train.sh).

Measured on the trivial jobs of the `submit` row (bench/trivial.py): the executor records the spawn
time in the attempt's record (`created_at`, taken right before Popen); train.sh writes bash's
$EPOCHREALTIME as its first instruction. In between: bootstrap.sh and the one interpreter it
execs (Python version check, integrity check of capsule.json and every listed file), the runner
venv the executor installed once per node exec'd from there (or the pex run in that interpreter
where there is none), the runner's journal and report socket, and the spawn of `bash train.sh`
(the ingest sender is imported and connects after it).

Peer (a floor): `bash train.sh` spawned directly with Popen, no capsule, measured the same way.
"""

from __future__ import annotations

from bench.common import Result, log, summary
from bench.trivial import trivial_runs


def run() -> list[Result]:
    runs = trivial_runs()
    ours = summary(runs.capsule_start)
    floor = summary(runs.bare_start)
    log(f"capsule: ours p50 {ours['p50'] * 1000:.0f} ms, bare bash {floor['p50'] * 1000:.1f} ms")
    return [
        Result(
            name="capsule",
            metric="process start -> first instruction of train.sh, p50",
            figure=ours["p50"],
            unit="s",
            peer="floor: `bash train.sh` spawned directly, p50",
            peer_figure=floor["p50"],
            ratio=ours["p50"] / floor["p50"] if floor["p50"] else None,
            ratio_note="ours / floor, lower is better",
            target="<= 0.300 s",
            met=ours["p50"] <= 0.3,
            command="python -m bench capsule",
            details={"ours": ours, "floor": floor},
        )
    ]
