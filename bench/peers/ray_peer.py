"""Ray peer: a local Ray head (started by PID, stopped by PID) and its Job Submission API.

Runs with the peers' virtualenv, inside a network namespace that has only `lo` (bench/common.py),
and binds 127.0.0.1 explicitly. Prints one JSON line:
  submit_to_running  seconds from JobSubmissionClient.submit_job() to status RUNNING (polled every 10 ms)
  log_latency        seconds from a line printed by the entrypoint to tail_job_logs() yielding it
  package_first/_again  seconds of submit_job(runtime_env={"working_dir": lab}) (hash+zip+upload)
  cli                wall seconds of the `ray job list` / `ray job status <id>` commands (process start to exit)
  connections        remote addresses of every TCP connection seen (`ss -tn`), to prove loopback only

Only stdlib + ray here: this file does not import the project.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

from ray.job_submission import JobStatus, JobSubmissionClient  # type: ignore[import-not-found]

DASHBOARD_PORT = 8265
GCS_PORT = 6379
TERMINAL = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}


def remote_addresses() -> list[str]:
    out = subprocess.run(["ss", "-tnH"], capture_output=True, text=True, check=False).stdout
    peers = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 5:
            peers.add(parts[4].rsplit(":", 1)[0])
    return sorted(peers)


def netns_pids() -> list[int]:
    """Processes in this network namespace: all of them were started by this script."""
    mine = os.readlink("/proc/self/ns/net")
    pids = []
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                if os.readlink(entry / "ns" / "net") == mine:
                    pids.append(int(entry.name))
    return pids


def temp_dir(work: pathlib.Path) -> pathlib.Path:
    """Ray's session folder: under `work` unless its socket paths would pass AF_UNIX's 107 bytes."""
    path = work / "ray"
    if len(str(path)) > 40:
        path = pathlib.Path(tempfile.mkdtemp(prefix="sfbench-ray-"))
        (work / "ray-temp-dir").write_text(str(path))
    return path


def start_head(work: pathlib.Path) -> tuple[subprocess.Popen[bytes], float]:
    ray = pathlib.Path(sys.executable).parent / "ray"
    t0 = time.monotonic()
    cmd = [
        str(ray), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={GCS_PORT}",
        "--dashboard-host=127.0.0.1", f"--dashboard-port={DASHBOARD_PORT}", "--include-dashboard=true",
        "--num-cpus=2", "--disable-usage-stats", f"--temp-dir={temp_dir(work)}",
    ]  # fmt: skip
    log = (work / "ray-head.log").open("ab")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    client = None
    try:
        while client is None:
            if proc.poll() is not None or time.monotonic() - t0 > 120:
                raise RuntimeError("ray head did not start: " + (work / "ray-head.log").read_text()[-2000:])
            try:
                client = JobSubmissionClient(f"http://127.0.0.1:{DASHBOARD_PORT}")
                client.list_jobs()
            except Exception:
                client = None
                time.sleep(0.2)
    except BaseException:  # not started, or stopped while starting: what did start goes too
        stop_all(proc)
        raise
    return proc, time.monotonic() - t0


def stop_all(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(15)
    for pid in netns_pids():  # raylet, gcs, dashboard, workers: ours by construction
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)


def rss_mib() -> float:
    total = 0
    for pid in netns_pids():
        with contextlib.suppress(OSError):
            for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total / 1024


def wait_terminal(client: Any, job_id: str, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = client.get_job_status(job_id)
        if status in TERMINAL:
            return status
        time.sleep(0.05)
    raise RuntimeError(f"ray job {job_id} did not end")


def submit_to_running(client: Any, work: pathlib.Path, n: int) -> list[float]:
    entry = "bash -c 'echo $EPOCHREALTIME > /dev/null; sleep 1'"
    out = []
    for i in range(n + 2):
        t0 = time.monotonic()
        job_id = client.submit_job(entrypoint=entry)
        while client.get_job_status(job_id) not in {JobStatus.RUNNING, *TERMINAL}:
            time.sleep(0.01)
        took = time.monotonic() - t0
        if wait_terminal(client, job_id) != JobStatus.SUCCEEDED:
            raise RuntimeError(f"ray job {job_id} failed: {client.get_job_logs(job_id)[-2000:]}")
        if i >= 2:  # two warm-up jobs
            out.append(took)
    return out


PRINTER = """
import time
time.sleep(1.0)
for i in range({n}):
    print("SFBENCH", i, repr(time.time()), flush=True)
    time.sleep({gap})
"""


async def _tail(client: Any, job_id: str, n: int) -> list[float]:
    latencies: list[float] = []
    async for chunk in client.tail_job_logs(job_id):
        now = time.time()
        for line in chunk.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[0] == "SFBENCH":
                latencies.append(now - float(parts[2]))
        if len(latencies) >= n:
            break
    return latencies


def log_latency(client: Any, work: pathlib.Path, n: int, gap: float) -> list[float]:
    script = work / "printer.py"
    script.write_text(PRINTER.format(n=n, gap=gap))
    job_id = client.submit_job(entrypoint=f"{sys.executable} -u {script}")
    latencies = asyncio.run(asyncio.wait_for(_tail(client, job_id, n), 120))
    wait_terminal(client, job_id)
    return latencies


def folder_bytes(lab: pathlib.Path, excludes: list[str]) -> int:
    total = 0
    for p in lab.rglob("*"):
        rel = p.relative_to(lab).as_posix()
        if p.is_file() and not any(rel == e or rel.startswith(e.rstrip("*")) for e in excludes):
            total += p.stat().st_size
    return total


def package(client: Any, lab: pathlib.Path) -> dict[str, Any]:
    """Ray's working_dir upload of the whole lab; Ray refuses packages over 100 MiB (HTTP 413), so
    on refusal it is measured on the part of the lab Ray accepts (the large blobs and half the
    shards excluded) and the refusal is reported."""
    excludes = [".git", ".starforge"]
    out: dict[str, Any] = {}
    try:
        t0 = time.monotonic()
        job_id = client.submit_job(entrypoint="true", runtime_env={"working_dir": str(lab), "excludes": excludes})
        out["full_lab_s"] = time.monotonic() - t0
        wait_terminal(client, job_id, 300)
    except RuntimeError as exc:
        out["full_lab_refused"] = str(exc).splitlines()[0][:200]
        excludes += ["data/blob-*", *[f"data/shard-{i:02d}" for i in range(10, 20)]]
    out["bytes"] = folder_bytes(lab, excludes)
    times = []
    for _ in range(2):
        t0 = time.monotonic()
        job_id = client.submit_job(entrypoint="true", runtime_env={"working_dir": str(lab), "excludes": excludes})
        times.append(time.monotonic() - t0)
        wait_terminal(client, job_id, 300)
    out["first_s"], out["again_s"] = times
    return out


def throughput(n: int, clients: int, timeout: float, warmup: int = 0) -> dict[str, Any]:
    """`n` jobs whose entrypoint is `true`, submitted by `clients` threads (each its own client, one
    submission after another); returns jobs ended per second and submit -> SUCCEEDED (the job's
    end_time, in ms) once every job ended, or how many ended when `timeout` ran out. First
    `warmup` jobs, one after another, each to its end, before the clock starts (not counted)."""
    import threading

    url = f"http://127.0.0.1:{DASHBOARD_PORT}"
    for _ in range(warmup):
        first = JobSubmissionClient(url)
        wait_terminal(first, first.submit_job(entrypoint="true"), 300)
    submitted: dict[str, float] = {}
    errors: list[str] = []

    def worker(k: int) -> None:
        c = JobSubmissionClient(url)
        for _ in range(k):
            t0 = time.time()
            try:
                submitted[c.submit_job(entrypoint="true")] = t0
            except Exception as exc:
                errors.append(str(exc)[:200])

    shares = [n // clients + (1 if i < n % clients else 0) for i in range(clients)]
    t_start = time.time()
    threads = [threading.Thread(target=worker, args=(k,)) for k in shares]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    t_submitted = time.time()
    client = JobSubmissionClient(url)
    ended: dict[str, float] = {}
    failed: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while len(ended) + len(failed) < len(submitted) and time.monotonic() < deadline:
        for job in client.list_jobs():
            sid = job.submission_id
            if sid in submitted and sid not in ended and job.status in TERMINAL:
                if job.status == JobStatus.SUCCEEDED and job.end_time:
                    ended[sid] = job.end_time / 1000
                else:
                    failed[sid] = str(job.status)
        print(f"ray throughput: {len(ended)}/{n} after {time.time() - t_start:.0f} s", file=sys.stderr, flush=True)
        time.sleep(1.0)
    span = (max(ended.values()) if ended else time.time()) - t_start
    lat = sorted(ended[j] - t0 for j, t0 in submitted.items() if j in ended)
    return {
        "jobs": n,
        "succeeded": len(ended),
        "failed": len(failed),
        "submit_errors": errors[:5],
        "submit_errors_n": len(errors),
        "complete": len(ended) == n,
        "per_s": len(ended) / span if span > 0 else 0.0,
        "span_s": span,
        "submit_s": t_submitted - t_start,
        "latency": {
            "p50": lat[len(lat) // 2] if lat else None,
            "p99": lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else None,
            "max": lat[-1] if lat else None,
        },
    }


def cli_latency(client: Any, n: int) -> dict[str, list[float]]:
    """Wall time of Ray's own job CLI against the warm head (the jobs of the earlier rows exist)."""
    ray = pathlib.Path(sys.executable).parent / "ray"
    address = f"http://127.0.0.1:{DASHBOARD_PORT}"
    job_id = client.list_jobs()[-1].submission_id
    out: dict[str, list[float]] = {"job_list": [], "job_status": []}
    for key, args in (("job_list", ["job", "list"]), ("job_status", ["job", "status", job_id])):
        for i in range(n + 1):  # one warm-up
            t0 = time.monotonic()
            subprocess.run([str(ray), *args, "--address", address], capture_output=True, check=True)
            if i:
                out[key].append(time.monotonic() - t0)
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--work", type=pathlib.Path, required=True)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--log-lines", type=int, default=200)
    p.add_argument("--log-gap", type=float, default=0.02)
    p.add_argument("--lab", type=pathlib.Path)
    p.add_argument("--throughput", type=int, default=0, help="only the throughput run, of this many jobs")
    p.add_argument("--warmup", type=int, default=0, help="throughput: jobs run to their end before the clock")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--timeout", type=float, default=1800.0)
    p.add_argument("--cli-runs", type=int, default=0)
    args = p.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    # the bench's SIGTERM (a timeout, its Ctrl-C): unwind through `finally`, which stops the head
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    proc, started = start_head(args.work)
    result: dict[str, Any] = {"head_start_s": started}
    try:
        client = JobSubmissionClient(f"http://127.0.0.1:{DASHBOARD_PORT}")
        if args.throughput:
            result.update(throughput(args.throughput, args.clients, args.timeout, args.warmup))
            result["head_rss_mib"] = rss_mib()
            result["connections"] = remote_addresses()
            result["ray_version"] = __import__("ray").__version__
        else:
            result["submit_to_running"] = submit_to_running(client, args.work, args.runs)
            result["head_rss_mib"] = rss_mib()
            result["log_latency"] = log_latency(client, args.work, args.log_lines, args.log_gap)
            if args.lab is not None:
                result["package"] = package(client, args.lab)
            if args.cli_runs:
                result["cli"] = cli_latency(client, args.cli_runs)
            result["connections"] = remote_addresses()
            result["ray_version"] = __import__("ray").__version__
    finally:
        stop_all(proc)
        moved = args.work / "ray-temp-dir"
        if moved.exists():
            shutil.rmtree(moved.read_text(), ignore_errors=True)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
