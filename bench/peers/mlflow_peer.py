"""MLflow peer: a local tracking server (`mlflow server`, SQLite backend store) started and stopped
by PID, and `MlflowClient.log_batch` from concurrent runs.

Runs with the peers' virtualenv inside a loopback-only network namespace. `--procs` processes each
run `--runs / --procs` threads; every thread creates its own run, then calls log_batch with 1000
metrics (MLflow's per-call maximum: 10 names x 100 steps) until the window ends. Prints one JSON line.
Only stdlib + mlflow here: this file does not import the project.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from typing import Any

PER_CALL = 1000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_server(work: pathlib.Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    mlflow = pathlib.Path(sys.executable).parent / "mlflow"
    cmd = [
        str(mlflow), "server", "--host", "127.0.0.1", "--port", str(port),
        "--backend-store-uri", f"sqlite:///{work / 'mlflow.db'}",
        "--default-artifact-root", str(work / "artifacts"),
    ]  # fmt: skip
    log = (work / "mlflow-server.log").open("ab")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=work)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    try:
        while True:
            with contextlib.suppress(OSError), urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return proc, url
            if proc.poll() is not None or time.monotonic() > deadline:
                log_text = (work / "mlflow-server.log").read_text()[-2000:]
                raise RuntimeError("mlflow server did not start: " + log_text)
            time.sleep(0.3)
    except BaseException:  # not started, or stopped while starting: what did start goes too
        stop_all(proc)
        raise


def stop_all(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def worker(url: str, threads: int, ready: Any, go: Any, window: Any, out: Any) -> None:
    """Create this process's runs first (not timed, retried: a busy server times out), report ready,
    then log batches from one thread per run until the window the parent set after everyone was ready."""
    from mlflow.entities import Metric  # type: ignore[import-not-found]
    from mlflow.tracking import MlflowClient  # type: ignore[import-not-found]

    client = MlflowClient(tracking_uri=url)
    run_ids = []
    for _ in range(threads):
        for attempt in range(20):
            try:
                run_ids.append(client.create_run("0").info.run_id)
                break
            except Exception:
                if attempt == 19:
                    raise
                time.sleep(1.0)
    ready.put(len(run_ids))
    go.wait()
    t_begin, t_end = window[0], window[1]
    counts = [0] * threads
    errors = [0] * threads

    def one(i: int) -> None:
        step = 0
        while True:
            if time.monotonic() >= t_end:
                return
            ts = int(time.time() * 1000)
            metrics = [
                Metric(f"train/metric_{k}", step + s * 0.001 + k, ts, step + s) for s in range(100) for k in range(10)
            ]
            try:
                client.log_batch(run_ids[i], metrics=metrics)
            except Exception:
                errors[i] += 1
                continue
            step += 100
            done = time.monotonic()
            if t_begin <= done < t_end:
                counts[i] += PER_CALL

    pool = [threading.Thread(target=one, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    out.put((sum(counts), sum(errors)))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--work", type=pathlib.Path, required=True)
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=2.0)
    args = p.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    # the bench's SIGTERM (a timeout, its Ctrl-C): unwind through `finally`, which stops the server
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    t0 = time.monotonic()
    proc, url = start_server(args.work)
    started = time.monotonic() - t0
    try:
        ctx = multiprocessing.get_context("spawn")
        queue, ready, go = ctx.Queue(), ctx.Queue(), ctx.Event()
        window = ctx.Array("d", [0.0, 0.0])
        per = args.runs // args.procs
        procs = [ctx.Process(target=worker, args=(url, per, ready, go, window, queue)) for _ in range(args.procs)]
        for w in procs:
            w.start()
        runs = sum(ready.get(timeout=600) for _ in procs)
        start = time.monotonic()
        window[0], window[1] = start + args.warmup, start + args.warmup + args.seconds
        go.set()
        results = [queue.get(timeout=args.seconds + 300) for _ in procs]
        for w in procs:
            w.join(60)
        import mlflow  # type: ignore[import-not-found]

        total = sum(r[0] for r in results)
        doc = {
            "per_s": total / args.seconds,
            "points_in_window": total,
            "errors": sum(r[1] for r in results),
            "server_start_s": started,
            "runs": runs,
            "mlflow_version": mlflow.__version__,
        }
    finally:
        stop_all(proc)
    print(json.dumps(doc), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
