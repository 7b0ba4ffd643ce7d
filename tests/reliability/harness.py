"""Shared pieces of the reliability tests: services as real processes we can SIGKILL by PID, a
training script that reports a known number of steps and lines, and the exactly-once checks.

Every check reads a second source where there is one: the executor's own records (one attempt
directory per attempt id, `bootstrap.log` with the line each attempt prints once when it starts)
and the ledger's event table, not just what the API says.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any

import grpc
import yaml
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.control.v1 import control_service_pb2_grpc as ctl_grpc
from starforge_api.job.v1 import job_pb2
from starforge_api.job.v1 import job_state_pb2 as st

from common.channel import aio_channel, bearer
from control import embedded
from control.app import start_control
from control.config import ControlConfig, FleetConfig, InventoryConfig
from control.db import models as m
from control.db.engine import Database
from control.telemetry import metrics
from tests.integration.console import EXECUTOR_TOKEN, Console, executor_yaml
from tests.ports import free_port

REPO = pathlib.Path(__file__).resolve().parents[2]
TERMINAL = (st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, st.JOB_STATE_STOPPED)


def wait_listening(port: int, proc: subprocess.Popen[bytes], log: pathlib.Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{log.stem} died: " + log.read_text(errors="replace")[-3000:])
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{log.stem} did not listen on {port}")


def sigkill(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGKILL exactly this process (a crash: no handler runs, nothing is cleaned up) and reap it."""
    if proc is not None and proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def terminate(proc: subprocess.Popen[bytes] | None, grace: float = 20.0) -> None:
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            sigkill(proc)


class ControlProcess:
    """`python -m control.main --config` as a real process we can SIGKILL (same state, same port)."""

    def __init__(self, root: pathlib.Path, executor_address: str, *, slots: int = 8, **extra: Any) -> None:
        self.root = root
        self.port = free_port()
        self.config = root / "control.yaml"
        self.log = root / "control.log"
        doc: dict[str, Any] = {
            "listen": f"127.0.0.1:{self.port}",
            "state_dir": str(root / "console"),
            "capsule_dir": str(embedded.ensure_capsule()),
            "bootstrap_admin": "admin",
            "default_images": {"custom": "host"},
            "scheduler_interval_seconds": 0.05,
            "reconcile_interval_seconds": 0.3,
            "fleets": [
                {
                    "name": "local",
                    "kind": "local",
                    "address": executor_address,
                    "token": EXECUTOR_TOKEN,
                    "inventory": [{"series": "cpu", "nodes": 1, "gpus_per_node": 0, "slots": slots}],
                }
            ],
            **extra,
        }
        self.config.write_text(yaml.safe_dump(doc))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def token(self) -> str:
        return (self.root / "console" / "admin-token").read_text().strip()

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "control.main", "--config", str(self.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO,
                env={k: v for k, v in os.environ.items() if not k.startswith("STARFORGE_")},
            )
        wait_listening(self.port, self.proc, self.log)

    def kill(self) -> None:
        sigkill(self.proc)

    def stop(self) -> None:
        terminate(self.proc)


class ExecutorProcess:
    """`starforge-executor --kind local` (process runtime) on a fixed port, restartable on the
    same state dir and port after a SIGKILL; its attempts run in their own sessions."""

    def __init__(self, root: pathlib.Path, *, slots: int = 8) -> None:
        self.root = root
        self.port = free_port()
        self.config = executor_yaml(root, "process", {"inventory": [{"series": "cpu", "gpus": 0, "slots": slots}]})
        self.state_dir = root / "executor"
        self.log = root / "executor.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        ready = self.root / "executor.ready"
        ready.unlink(missing_ok=True)
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "executor_svc.main",
                    "--kind",
                    "local",
                    "--config",
                    str(self.config),
                    "--listen",
                    self.address,
                    "--ready-file",
                    str(ready),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=REPO,
                env={k: v for k, v in os.environ.items() if not k.startswith("STARFORGE_")},
            )
        deadline = time.monotonic() + 30
        while not ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("executor did not start: " + self.log.read_text(errors="replace")[-3000:])
            time.sleep(0.02)
        self.starts += 1

    def kill(self) -> None:
        sigkill(self.proc)

    def stop(self) -> None:
        terminate(self.proc)


def control_config(root: pathlib.Path, executor_address: str, *, slots: int = 8, **overrides: Any) -> ControlConfig:
    """An in-process control plane's config with one `local` fleet at `executor_address`."""
    cfg = ControlConfig(
        listen="127.0.0.1:0",
        state_dir=root / "console",
        capsule_dir=embedded.ensure_capsule(),
        bootstrap_admin="admin",
        default_images={"custom": "host"},
        scheduler_interval_seconds=0.05,
        reconcile_interval_seconds=0.3,
        stop_grace_seconds=3,
        fleets=[
            FleetConfig(
                name="local",
                kind="local",
                address=executor_address,
                inventory=[InventoryConfig(series="cpu", nodes=1, gpus_per_node=0, slots=slots)],
                token=EXECUTOR_TOKEN,
            )
        ],
    )
    return dataclasses.replace(cfg, **overrides)


@contextlib.asynccontextmanager
async def inprocess_console(
    root: pathlib.Path, executor: ExecutorProcess | None, cfg: ControlConfig
) -> AsyncIterator[Console]:
    """The control plane in this process (so tests can reach its ledger) over `executor`."""
    root.mkdir(parents=True, exist_ok=True)
    app = await start_control(cfg)
    token = (cfg.resolved_state_dir / "admin-token").read_text().strip()
    channel = aio_channel(app.address)
    c = Console(
        app,
        token,
        root,
        executor.proc if executor else None,
        executor.address if executor else "",
        channel,
        extra={"user": "admin"},
    )
    try:
        yield c
    finally:
        await channel.close(None)
        await app.stop(0)


def reporting_train(steps: int, interval: float = 0.05) -> str:
    """train.sh: prints `start <attempt>` once, then `steps` numbered lines and metric points."""
    return f"""#!/usr/bin/env bash
echo "start $FORGE_ATTEMPT_ID"
python3 - <<'PY'
import time, starforge
for step in range(1, {steps} + 1):
    starforge.report(step=step, loss=1.0 / step)
    print(f"line {{step}}", flush=True)
    time.sleep({interval})
PY
"""


async def submit_many(c: Console, n: int, train_sh: str, *, experiment: str = "exp") -> list[str]:
    """`n` jobs of the same lab (one upload, then n SubmitJob calls with request ids)."""
    first = await c.submit_custom(train_sh, experiment=experiment)
    spec = (await c.get(first.job_id)).spec
    ids = [first.job_id]
    for i in range(1, n):
        r = await c.jobs.SubmitJob(ctl.SubmitJobRequest(spec=spec, request_id=f"{experiment}-{i}"), metadata=c.md)
        ids.append(r.job.job_id)
    return ids


async def wait_terminal(
    address_or_channel: str | grpc.aio.Channel,
    token: str,
    job_ids: Iterable[str],
    timeout: float = 300.0,
    on_timeout: str = "",
) -> dict[str, job_pb2.Job]:
    """Every job once terminal (polls ListJobs; tolerates a console that is briefly away)."""
    wanted = set(job_ids)
    own = isinstance(address_or_channel, str)
    channel = aio_channel(address_or_channel) if isinstance(address_or_channel, str) else address_or_channel
    stub = ctl_grpc.ControlServiceStub(channel)
    deadline = time.monotonic() + timeout
    states: dict[str, job_pb2.Job] = {}
    try:
        while True:
            try:
                r = await stub.ListJobs(ctl.ListJobsRequest(page_size=1000), metadata=bearer(token), timeout=30)
                states = {j.job_id: j for j in r.jobs if j.job_id in wanted}
            except grpc.aio.AioRpcError:
                pass
            if len(states) == len(wanted) and all(j.state in TERMINAL for j in states.values()):
                return states
            if time.monotonic() > deadline:
                left = {k: st.JobState.Name(v.state) for k, v in states.items() if v.state not in TERMINAL}
                raise AssertionError(f"not terminal after {timeout:.0f}s: {left}\n{on_timeout}")
            await asyncio.sleep(0.5)
    finally:
        if own:
            await channel.close(None)


def assert_all_succeeded_once(jobs: Mapping[str, job_pb2.Job]) -> None:
    bad = [
        (j.job_id, st.JobState.Name(j.state), len(j.attempts), j.diagnosis.summary or j.attempts[-1].reason)
        for j in jobs.values()
        if j.state != st.JOB_STATE_SUCCEEDED or len(j.attempts) != 1
    ]
    assert not bad, f"{len(bad)} job(s) did not succeed in exactly one attempt: {bad[:10]}"


def terminal_events(db_url: str) -> list[str]:
    """Job ids of every terminal ledger event (one per job when nothing ended twice)."""
    db = Database(db_url)
    try:
        return db.run_sync(lambda s: [e.job_id for e in s.query(m.JobEvent).filter(m.JobEvent.to_state.in_(TERMINAL))])
    finally:
        db.close()


def assert_launched_once(state_dir: pathlib.Path, job_ids: Iterable[str]) -> None:
    """The executor's own records: one attempt directory per job, whose capsule started once."""
    ids = sorted(job_ids)
    attempts = sorted(p.name for p in (state_dir / "attempts").iterdir() if (p / "attempt.json").exists())
    assert sorted(a.rsplit(".", 1)[0] for a in attempts) == ids, (
        f"{len(attempts)} attempts on the executor for {len(ids)} jobs"
    )
    for a in attempts:
        log = (state_dir / "attempts" / a / "bootstrap.log").read_text(errors="replace")
        assert log.count(f"start {a}\n") == 1, f"{a} started {log.count(f'start {a}')} times"


async def assert_reported_once(c: Console, db: Database, job_ids: Iterable[str], steps: int) -> None:
    """Every job's log holds `line 1..steps` once, in order; its metric `loss` has steps 1..steps once,
    as stored rows (not only as the API dedups them)."""
    want_lines = [f"line {i}" for i in range(1, steps + 1)]
    ids = list(job_ids)
    for job_id in ids:
        lines = [ln for ln in await c.logs(job_id) if ln.startswith("line ")]
        assert lines == want_lines, f"{job_id}: {len(lines)} lines, first differences {_diff(lines, want_lines)}"
        r = await c.jobs.GetJobMetrics(ctl.GetJobMetricsRequest(job_id=job_id, names=["loss"]), metadata=c.md)
        got = [p.step for s in r.series for p in s.points]
        assert got == list(range(1, steps + 1)), f"{job_id}: metric steps {got[:5]}... ({len(got)})"
    counts = await db.run(lambda s: {job_id: metrics.count(s, job_id, "loss") for job_id in ids})
    for job_id in ids:
        assert counts.get(job_id) == steps, f"{job_id}: {counts.get(job_id)} stored points, want {steps}"


def _diff(got: list[str], want: list[str]) -> list[str]:
    return [f"{g!r}!={w!r}" for g, w in zip(got, want, strict=False) if g != w][:3]


async def until(check: Callable[[], Awaitable[object]], timeout: float = 60.0, what: str = "") -> None:
    """Poll `check` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what or check}")
        await asyncio.sleep(0.02)


def rss_bytes(pid: int) -> int:
    """Resident set size of `pid` (and nothing else) from /proc."""
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=1, default=str)
