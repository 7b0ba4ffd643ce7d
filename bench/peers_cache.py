"""The Ray peer runs once per `python -m bench` process: one head serves the submit, log-follow,
packaging and cli rows (started by PID inside a loopback-only network namespace, stopped right after)."""

from __future__ import annotations

from typing import Any

from bench.common import QUICK, WORK, log, run_peer, skip_peer

_ray: list[dict[str, Any]] = []
_failed: list[BaseException] = []


def ray_results() -> dict[str, Any]:
    if _failed:
        raise RuntimeError("the Ray peer failed earlier in this run") from _failed[0]
    if not _ray:
        from bench import packaging, trivial

        lab = packaging.ensure_data()
        log("Ray peer: head start, submit->RUNNING, log follow, working_dir upload")
        args = ["--work", str(WORK / "ray"), "--runs", str(trivial.RUNS), "--log-lines", "100" if QUICK else "300"]
        args += ["--cli-runs", "3" if QUICK else "10"]
        try:
            _ray.append(run_peer("ray_peer.py", [*args, "--lab", str(lab)], timeout=900))
        except Exception as exc:
            _failed.append(exc)
            raise
        doc = _ray[0]
        if any(not a.strip("[]").removeprefix("::ffff:").startswith("127.") for a in doc.get("connections", [])):
            raise RuntimeError(f"the Ray peer talked to a non-loopback address: {doc['connections']}")
    return _ray[0]


def ray_or_none(row: str) -> dict[str, Any] | None:
    """The Ray run's results, or None where quick mode leaves the peer out (said in the log)."""
    return None if skip_peer(row) else ray_results()
