"""Log follow latency: from a line printed by training code to the same line printed by `sf job logs -f`.

Ours: a custom/custom job on the real embedded console whose train.sh runs a Python loop printing
`SFBENCH <i> <time.time()>` every 20 ms (flushed, as PYTHONUNBUFFERED does). The real `sf` binary
follows the job (`sf job logs <id> -f`) as a subprocess; each line it prints is stamped when the
benchmark reads it from sf's stdout. Same clock, same machine.

Peer: Ray's `JobSubmissionClient.tail_job_logs` on a Ray job printing the same lines (bench/peers/ray_peer.py,
measured in the Ray run of the `submit` row).
"""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time

from bench.common import PEER_NOT_RUN, QUICK, Result, fresh_dir, log, ratio_lower_better, summary
from bench.console import Client, Console, running_console
from bench.peers_cache import ray_or_none

LINES = 100 if QUICK else 300
GAP_S = 0.02
TRAIN_SH = f"""#!/usr/bin/env bash
exec python3 -u -c '
import time
time.sleep(1.0)
for i in range({LINES}):
    print("SFBENCH", i, repr(time.time()), flush=True)
    time.sleep({GAP_S})
'
"""


def _follow(console: Console, job_id: str, latencies: list[float]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [str(console_sf()), "job", "logs", job_id, "-f"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=console.env(),
        bufsize=1,
    )

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            now = time.time()
            parts = line.split()
            if len(parts) == 3 and parts[0] == "SFBENCH":
                latencies.append(now - float(parts[2]))

    threading.Thread(target=read, daemon=True).start()
    return proc


def console_sf() -> str:
    from bench.console import SF

    return str(SF)


async def _measure(console: Console) -> list[float]:
    client = Client(console)
    try:
        spec = await client.custom_spec(TRAIN_SH)
        job = await client.submit(spec)
        latencies: list[float] = []
        proc = _follow(console, job.job_id, latencies)
        try:
            await asyncio.to_thread(proc.wait, 120)
        finally:
            if proc.poll() is None:
                proc.kill()
        return latencies
    finally:
        await client.close()


def measure_ours() -> list[float]:
    work = fresh_dir("log-follow")
    with running_console(work / "console") as console:
        return asyncio.run(_measure(console))


def run() -> list[Result]:
    ours = measure_ours()
    if len(ours) < LINES:
        raise RuntimeError(f"sf job logs -f printed {len(ours)} of {LINES} lines")
    s = summary(ours)
    log(f"log follow: ours p50 {s['p50'] * 1000:.0f} ms p99 {s['p99'] * 1000:.0f} ms")
    ray = ray_or_none("log-follow")
    peer = summary(ray["log_latency"]) if ray else {"p99": None}
    return [
        Result(
            name="log-follow",
            metric="printed line -> shown by `sf job logs -f`, p99",
            figure=s["p99"],
            unit="s",
            peer=f"Ray {ray.get('ray_version', '')} tail_job_logs, p99" if ray else PEER_NOT_RUN,
            peer_figure=peer["p99"],
            ratio=ratio_lower_better(s["p99"], peer["p99"]),
            ratio_note="Ray p99 / ours p99",
            target="p99 <= 0.200 s",
            met=s["p99"] <= 0.2,
            command="python -m bench log-follow",
            details={"ours": s, "ray": peer, "lines": LINES, "gap_s": GAP_S},
        )
    ]
