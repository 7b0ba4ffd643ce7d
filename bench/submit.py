"""Submit -> RUNNING of a trivial job on a warm embedded console, against Ray's Job Submission API.

Ours: bench/trivial.py (SubmitJob, then WatchJob until the RUNNING transition arrives; p50 of 20
jobs after 2 warm-up jobs). Peer: a local Ray head (bench/peers/ray_peer.py): `submit_job` of the
same trivial command, status polled every 10 ms until RUNNING; p50 of 20 jobs after 2 warm-up jobs.
"""

from __future__ import annotations

from bench.common import PEER_NOT_RUN, Result, log, ratio_lower_better, summary
from bench.peers_cache import ray_or_none
from bench.trivial import trivial_runs


def run() -> list[Result]:
    ray = ray_or_none("submit")
    runs = trivial_runs()
    ours = summary(runs.submit_to_running)
    peer = summary(ray["submit_to_running"]) if ray else {"p50": None}
    log(f"submit: ours p50 {ours['p50'] * 1000:.0f} ms, Ray p50 {peer['p50']}")
    ratio = ratio_lower_better(ours["p50"], peer["p50"])
    return [
        Result(
            name="submit",
            metric="submit -> RUNNING, trivial job, warm embedded console, p50",
            figure=ours["p50"],
            unit="s",
            peer=f"Ray {ray.get('ray_version', '')} JobSubmissionClient, local head, p50" if ray else PEER_NOT_RUN,
            peer_figure=peer["p50"],
            ratio=ratio,
            ratio_note="Ray / ours",
            target="p50 <= 0.5 s and >= 3x faster than Ray",
            met=ours["p50"] <= 0.5 and (ratio or 0) >= 3,
            command="python -m bench submit",
            details={
                "ours": ours,
                "ray": peer,
                "stages_p50_s": {k: summary(v)["p50"] for k, v in runs.stages.items()},
                "ray_head_start_s": ray.get("head_start_s") if ray else None,
                "ray_head_rss_mib": ray.get("head_rss_mib") if ray else None,
                "console_memory": runs.console_memory,
            },
        )
    ]
