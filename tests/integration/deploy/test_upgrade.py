"""A rolling upgrade from the last release to this tree while jobs run, on PostgreSQL.

The last release (deploy/releases.txt, extracted with `git archive`, run in its own venv layered on
this one: tools/releases.py) serves as a control replica and a local executor (process runtime)
behind a TCP balancer, which is the address clients and capsules are told (`public_address`).
Jobs run and queue (more than the slots); then, one replica at a time:

1. this tree's migrations are applied while the old replica serves, and the old replica keeps
   working on the expanded schema: it admits, lists and streams logs, finishes a job and
   dispatches the next one (with a run token of its own kind, which this tree must accept);
2. a replica of this tree starts alongside, then the old one stops (the balancer sends new
   connections to the one left; the capsules reconnect and resend what they journaled);
3. the executor restarts on this tree's code on the same state dir and port, adopting the
   attempts the old one started.

Afterwards every job succeeded in one attempt, reached its terminal state once in the ledger, was
launched once (the executor's own records), and its log lines and metric points are stored once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any, cast

import grpc
import pytest
import yaml
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.job.v1 import job_pb2
from starforge_api.job.v1 import job_state_pb2 as st

from common.channel import aio_channel
from control import embedded
from control.app import ControlApp
from control.db import migrate
from control.db.engine import Database
from tests.db import create_pg_database, drop_pg_database
from tests.integration.console import EXECUTOR_TOKEN, Console, executor_yaml
from tests.ports import free_port
from tests.reliability.harness import (
    assert_all_succeeded_once,
    assert_launched_once,
    assert_reported_once,
    submit_many,
    terminal_events,
    terminate,
    until,
    wait_listening,
    wait_terminal,
)
from tools import releases

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

REPO = pathlib.Path(__file__).resolve().parents[3]
SLOTS = 2
JOBS_BEFORE = 4  # 2 running (one of them "early"), 2 queued
JOBS_EXPANDED = 2  # admitted by the old replica on the expanded schema
STEPS = 40
GATE_STEP = 10  # running jobs wait here until the upgrade is over


def gated_train(gate: pathlib.Path) -> str:
    """Prints `start <attempt>` once, then `line N` and metric point N for N in 1..STEPS; waits
    before GATE_STEP until `gate` exists (so the first jobs run across the whole upgrade)."""
    return f"""#!/usr/bin/env bash
echo "start $FORGE_ATTEMPT_ID"
python3 - <<'PY'
import os, time, starforge
for step in range(1, {STEPS} + 1):
    if step == {GATE_STEP}:
        while not os.path.exists({str(gate)!r}):
            time.sleep(0.1)
    starforge.report(step=step, loss=1.0 / step)
    print(f"line {{step}}", flush=True)
    time.sleep(0.02)
PY
"""


class Balancer:
    """A TCP balancer: each new connection goes to the first backend that accepts it. Stands in
    for the load balancer in front of the replicas (`public_address`)."""

    def __init__(self) -> None:
        self.backends: list[str] = []
        self.server: asyncio.Server | None = None
        self.port = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for backend in list(self.backends):
            host, port = backend.rsplit(":", 1)
            try:
                up_reader, up_writer = await asyncio.open_connection(host, int(port))
                break
            except OSError:
                continue
        else:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


class Service:
    """A control replica or an executor as a real process of one tree's code."""

    def __init__(self, name: str, root: pathlib.Path, python: pathlib.Path, cwd: pathlib.Path, args: list[str]) -> None:
        self.name = name
        self.log = root / f"{name}.log"
        self.python, self.cwd, self.args = python, cwd, args
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, port: int) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [str(self.python), *self.args],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.cwd,
                start_new_session=True,
                env={k: v for k, v in os.environ.items() if not k.startswith("STARFORGE_") and k != "PYTHONPATH"},
            )
        wait_listening(port, self.proc, self.log, timeout=90)

    def stop(self) -> None:
        terminate(self.proc)

    def tail(self) -> str:
        return f"--- {self.name}\n" + self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""


def control_service(
    name: str, root: pathlib.Path, python: pathlib.Path, tree: pathlib.Path, capsule: pathlib.Path, **common: Any
) -> tuple[Service, int]:
    port = free_port()
    doc = {
        "listen": f"127.0.0.1:{port}",
        "state_dir": str(root / name),
        "capsule_dir": str(capsule),
        **common,
    }
    config = root / f"{name}.yaml"
    config.write_text(yaml.safe_dump(doc))
    return Service(name, root, python, tree, ["-m", "control.main", "--config", str(config)]), port


def executor_service(
    name: str, root: pathlib.Path, python: pathlib.Path, tree: pathlib.Path, config: pathlib.Path, port: int
) -> Service:
    args = ["-m", "executor_svc.main", "--kind", "local", "--config", str(config), "--listen", f"127.0.0.1:{port}"]
    return Service(name, root, python, tree, args)


@contextlib.asynccontextmanager
async def console_via(balancer: Balancer, token: str, root: pathlib.Path) -> AsyncIterator[Console]:
    """The test's client: the harness Console, talking through the balancer."""
    channel = aio_channel(balancer.address)
    app = cast(ControlApp, type("Front", (), {"address": balancer.address})())
    try:
        yield Console(app, token, root, None, "", channel, extra={"user": "admin"})
    finally:
        await channel.close(None)


async def _running_with_points(c: Console, job_ids: list[str], at_least: int) -> bool:
    for job_id in job_ids:
        job = await c.get(job_id)
        if job.state != st.JOB_STATE_RUNNING:
            return False
        r = await c.jobs.GetJobMetrics(ctl.GetJobMetricsRequest(job_id=job_id, names=["loss"]), metadata=c.md)
        if len([p for s in r.series for p in s.points]) < at_least:
            return False
    return True


@pytest.mark.timeout(900)
async def test_rolling_upgrade_from_the_last_release_loses_and_duplicates_nothing(tmp_path: pathlib.Path) -> None:
    release = releases.last_release()
    old_tree = releases.extract(release, tmp_path / "release")
    old_python = releases.layered_venv(old_tree, tmp_path / "release-venv")
    new_capsule = embedded.ensure_capsule()  # this tree's capsule; fills build/wheelhouse
    (old_tree / "build").mkdir(exist_ok=True)
    (old_tree / "build" / "wheelhouse").symlink_to(REPO / "build" / "wheelhouse")  # offline build
    old_capsule = old_tree / "build" / "capsule"
    subprocess.run(
        [str(old_python), "-m", "capsule.build", "--out", str(old_capsule)],
        cwd=old_tree,
        check=True,
        capture_output=True,
    )

    url = create_pg_database()
    balancer = Balancer()
    await balancer.start()
    gate = tmp_path / "gate"
    early_gate = tmp_path / "gate-early"
    executor_port = free_port()
    exec_config = executor_yaml(tmp_path, "process", {"inventory": [{"series": "cpu", "gpus": 0, "slots": SLOTS}]})
    common = {
        "database_url": url,
        "blob_dir": str(tmp_path / "shared-blobs"),  # replicas share it (NFS or a bucket in a deployment)
        "public_address": balancer.address,
        "bootstrap_admin": "admin",
        "default_images": {"custom": "host"},
        "hf_precheck": False,
        "scheduler_interval_seconds": 0.1,
        "reconcile_interval_seconds": 0.5,
        "fleets": [
            {
                "name": "local",
                "kind": "local",
                "address": f"127.0.0.1:{executor_port}",
                "token": EXECUTOR_TOKEN,
                "inventory": [{"series": "cpu", "nodes": 1, "gpus_per_node": 0, "slots": SLOTS}],
            }
        ],
    }
    old_control, old_port = control_service("control-old", tmp_path, old_python, old_tree, old_capsule, **common)
    new_control, new_port = control_service(
        "control-new", tmp_path, pathlib.Path(sys.executable), REPO, new_capsule, **common
    )
    old_executor = executor_service("executor-old", tmp_path, old_python, old_tree, exec_config, executor_port)
    new_executor = executor_service(
        "executor-new", tmp_path, pathlib.Path(sys.executable), REPO, exec_config, executor_port
    )
    services = [old_control, new_control, old_executor, new_executor]

    def logs() -> str:
        return "\n".join(s.tail() for s in services)

    try:
        # (processes start and stop in threads: the balancer serves from this event loop)
        await asyncio.to_thread(old_executor.start, executor_port)
        await asyncio.to_thread(old_control.start, old_port)
        balancer.backends = [f"127.0.0.1:{old_port}"]
        token = (tmp_path / "control-old" / "admin-token").read_text().strip()
        async with console_via(balancer, token, tmp_path) as c:
            # the release serves: two jobs run (all the slots), two queue
            early = await submit_many(c, 1, gated_train(early_gate), experiment="early")
            first = early + await submit_many(c, JOBS_BEFORE - 1, gated_train(gate), experiment="before")
            await until(lambda: _running_with_points(c, first[:SLOTS], 3), 120, "the first jobs to report")

            # 1. expand: this tree's migrations, while the release's replica serves
            db = Database(url)
            try:
                await asyncio.to_thread(migrate.upgrade, db.engine)
                # ... and the release keeps working on the expanded schema
                expanded = await submit_many(c, JOBS_EXPANDED, gated_train(gate), experiment="expanded")
                listed = await c.jobs.ListJobs(ctl.ListJobsRequest(page_size=100), metadata=c.md)
                assert {j.job_id for j in listed.jobs} == set(first + expanded)
                assert any(ln.startswith("line ") for ln in await c.logs(first[0]))
                job_ids = first + expanded
                # the early job ends; the old replica records it and dispatches the next queued one
                early_gate.touch()
                done = await wait_terminal(c.channel, c.token, early, timeout=120, on_timeout=logs())
                assert done[early[0]].state == st.JOB_STATE_SUCCEEDED, done
                await until(lambda: _running_with_points(c, first[SLOTS : SLOTS + 1], 3), 120, "the next job")

                # 2. a replica of this tree alongside, then the release's replica goes
                await asyncio.to_thread(new_control.start, new_port)
                balancer.backends = [f"127.0.0.1:{old_port}", f"127.0.0.1:{new_port}"]
                async with console_via(_direct(new_port), token, tmp_path) as direct:
                    seen = await direct.jobs.ListJobs(ctl.ListJobsRequest(page_size=100), metadata=direct.md)
                    assert {j.job_id for j in seen.jobs} == set(job_ids)
                balancer.backends = [f"127.0.0.1:{new_port}"]
                await asyncio.to_thread(old_control.stop)
                assert old_control.proc is not None and old_control.proc.returncode is not None

                # 3. the executor restarts on this tree's code; the running jobs keep running
                await asyncio.to_thread(old_executor.stop)
                await asyncio.to_thread(new_executor.start, executor_port)
                # the gated jobs the old executor started (one of them dispatched by the old replica
                # on the expanded schema) still run: adopted, not lost or launched again
                running = {j.job_id for j in await _jobs(c, job_ids) if j.state == st.JOB_STATE_RUNNING}
                assert set(first[1 : SLOTS + 1]) <= running, running

                gate.touch()
                jobs = await wait_terminal(c.channel, c.token, job_ids, timeout=600, on_timeout=logs())
                assert_all_succeeded_once(jobs)
                await assert_reported_once(c, db, job_ids, STEPS)
            finally:
                db.close()
        assert sorted(terminal_events(url)) == sorted(job_ids)
        assert_launched_once(tmp_path / "executor", job_ids)
    except BaseException:
        print(logs())
        raise
    finally:
        # A failed run must not leave jobs waiting on their gates: the executors do not end the
        # jobs they started (jobs outlive an executor restart), so open the gates and let them end.
        gate.touch()
        early_gate.touch()
        for service in services:
            await asyncio.to_thread(service.stop)
        await balancer.stop()
        drop_pg_database(url)
        _kill_processes_under(tmp_path)


def _kill_processes_under(root: pathlib.Path) -> None:
    """End what this test's jobs left running (their runners retry a control plane that is gone):
    the processes whose command line names this test's directory, each by its PID."""
    marker = str(root).encode()
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "cmdline").read_bytes():
                os.kill(int(entry.name), signal.SIGKILL)
        except OSError:
            continue


def _direct(port: int) -> Balancer:
    """A replica's own address, shaped like the balancer for console_via."""
    front = Balancer()
    front.port = port
    return front


async def _jobs(c: Console, job_ids: list[str]) -> list[job_pb2.Job]:
    """The jobs, once the client's connection (to a replica that went away) is re-established:
    clients retry UNAVAILABLE, as `sf` does."""
    for _ in range(100):
        try:
            return [await c.get(job_id) for job_id in job_ids]
        except grpc.aio.AioRpcError as e:
            if e.code() != grpc.StatusCode.UNAVAILABLE:
                raise
            await asyncio.sleep(0.2)
    raise AssertionError("the console stayed unavailable")
