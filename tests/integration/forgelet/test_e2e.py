"""The agent executor through the real `sf` binary: an `agent` fleet of forgelet processes.

The console (control plane in-process + the agent executor as a real process, started by the
harness) and two forgelet nodes (real processes, docker runtime, 8 configured GPUs each) run jobs
in the starforge-test-python image on the private dockerd. Containers use the host network, so
the capsule reports to the console on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import pathlib
import re
import time
from collections.abc import Awaitable, Callable

import pytest
from starforge_api.forgelet.v1 import node_pb2
from starforge_api.job.v1 import job_pb2
from starforge_api.job.v1 import job_state_pb2 as st

from tests.integration.backends.docker import TEST_IMAGE, DockerEngine
from tests.integration.console import Console
from tests.integration.forgelet.fleet import ForgeletProcess, agent_console, list_nodes, wait_nodes

pytestmark = [pytest.mark.docker, pytest.mark.slow]

# Waits for $FORGE_OUT_DIR/release (the test creates it on the node), so nothing depends on timing.
WAIT_FOR_RELEASE = """\
#!/usr/bin/env bash
echo "attempt $FORGE_ATTEMPT_NUMBER started on gpus $CUDA_VISIBLE_DEVICES"
for _ in $(seq 1200); do [ -e "$FORGE_OUT_DIR/release" ] && break; sleep 0.1; done
echo "attempt $FORGE_ATTEMPT_NUMBER finished"
"""


async def submit(c: Console, lab: pathlib.Path, experiment: str, profile: str = "h200:4") -> str:
    r = await c.sf_async("submit", experiment, "--profile", profile, cwd=lab)
    found = re.search(r"submitted job (\S+)", r.stdout)
    assert found, r.stdout + r.stderr
    return found.group(1)


async def until(what: str, check: Callable[[], Awaitable[bool]], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


async def wait_state(c: Console, job_id: str, *states: int, timeout: float = 120) -> job_pb2.Job:
    """The job once in one of `states`; on a timeout, what it waits for and the executor's log."""
    deadline = time.monotonic() + timeout
    job = await c.get(job_id)
    while job.state not in states:
        if time.monotonic() > deadline:
            log = (c.root / "executor.log").read_text(errors="replace").splitlines()[-30:]
            raise AssertionError(
                f"job {job_id} is {st.JobState.Name(job.state)}, wanted {[st.JobState.Name(s) for s in states]}:\n"
                f"{job.wait}\n{list(job.attempts)}\nagent executor log:\n" + "\n".join(log)
            )
        await asyncio.sleep(0.2)
        job = await c.get(job_id)
    return job


async def running_on(c: Console, job_id: str) -> tuple[job_pb2.Job, str]:
    job = await wait_state(c, job_id, st.JOB_STATE_RUNNING)
    node = job.attempts[-1].node
    assert node in ("n1", "n2"), job
    return job, node


def release(f: ForgeletProcess, job_id: str) -> None:
    (f.state_dir / "out" / job_id / "release").touch()


def other(node: str) -> str:
    return "n2" if node == "n1" else "n1"


async def test_job_runs_to_success_with_logs(tmp_path: pathlib.Path, dockerd: DockerEngine, python_image: str) -> None:
    async with agent_console(tmp_path, dockerd) as (c, fleet):
        lab = await c.lab("ok", WAIT_FOR_RELEASE, config={"image": TEST_IMAGE})
        job_id = await submit(c, lab, "ok")
        job, node = await running_on(c, job_id)
        attempt = job.attempts[-1]
        assert (attempt.executor_kind, attempt.fleet) == ("agent", "agent")
        (container,) = fleet[node].containers(dockerd.client, attempt.attempt_id)
        assert container.status == "running"
        assert container.attrs["HostConfig"]["NetworkMode"] == "host"
        await until(
            "the heartbeat to show the attempt",
            lambda: _runs(c, node, attempt.attempt_id),
        )
        release(fleet[node], job_id)
        job = await wait_state(c, job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=120)
        assert job.state == st.JOB_STATE_SUCCEEDED, job
        assert len(job.attempts) == 1 and job.attempts[0].exit_code == 0
        logs = "\n".join(await c.logs(job_id))
        assert "attempt 1 started on gpus 0,1,2,3" in logs and "attempt 1 finished" in logs
        status = await c.sf_async("job", "status", job_id)
        assert "SUCCEEDED" in status.stdout


async def _runs(c: Console, node: str, attempt_id: str) -> bool:
    return attempt_id in (await list_nodes(c))[node].running_attempt_ids


async def test_sf_job_stop_stops_the_container(
    tmp_path: pathlib.Path, dockerd: DockerEngine, python_image: str
) -> None:
    async with agent_console(tmp_path, dockerd) as (c, fleet):
        lab = await c.lab("long", WAIT_FOR_RELEASE, config={"image": TEST_IMAGE})
        job_id = await submit(c, lab, "long")
        job, node = await running_on(c, job_id)
        attempt_id = job.attempts[-1].attempt_id
        await c.sf_async("job", "stop", job_id)
        job = await wait_state(c, job_id, st.JOB_STATE_STOPPED, timeout=60)
        assert job.attempts[-1].state == st.JOB_STATE_STOPPED
        await until("the container to be removed", lambda: _gone(fleet[node], dockerd, attempt_id))


async def _gone(f: ForgeletProcess, engine: DockerEngine, attempt_id: str) -> bool:
    return not f.containers(engine.client, attempt_id)


async def test_forgelet_restart_keeps_the_job_running(
    tmp_path: pathlib.Path, dockerd: DockerEngine, python_image: str
) -> None:
    async with agent_console(tmp_path, dockerd) as (c, fleet):
        lab = await c.lab("survive", WAIT_FOR_RELEASE, config={"image": TEST_IMAGE})
        job_id = await submit(c, lab, "survive")
        job, node = await running_on(c, job_id)
        attempt_id = job.attempts[-1].attempt_id
        f = fleet[node]
        old_pid = f.proc.pid if f.proc else 0
        f.kill()  # SIGKILL: no cleanup of any kind
        (container,) = f.containers(dockerd.client, attempt_id)
        assert container.status == "running"
        await asyncio.sleep(1)
        restarted_at = time.time()
        f.start()  # same config, state dir and port
        assert f.proc is not None and f.proc.pid != old_pid
        # The new process found the container and holds its GPUs again ...
        fresh = await f.get_node()
        assert list(fresh.running_attempt_ids) == [attempt_id] and list(fresh.used_gpu_indices) == [0, 1, 2, 3]

        # ... and says so in its heartbeats.
        async def heartbeat_after_restart() -> bool:
            n = (await list_nodes(c))[node]
            return n.last_heartbeat_time.seconds > restarted_at and attempt_id in n.running_attempt_ids

        await until("a heartbeat of the new forgelet with the attempt", heartbeat_after_restart)
        assert (await c.get(job_id)).state == st.JOB_STATE_RUNNING
        release(f, job_id)
        job = await wait_state(c, job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=120)
        assert job.state == st.JOB_STATE_SUCCEEDED, job
        assert len(job.attempts) == 1
        assert "attempt 1 finished" in "\n".join(await c.logs(job_id))


async def test_lost_node_fails_the_attempt_and_the_retry_succeeds_elsewhere(
    tmp_path: pathlib.Path, dockerd: DockerEngine, python_image: str
) -> None:
    train = """\
#!/usr/bin/env bash
echo "attempt $FORGE_ATTEMPT_NUMBER on $FORGE_ATTEMPT_ID"
if [ "$FORGE_ATTEMPT_NUMBER" = "1" ]; then sleep 600; fi
echo "attempt $FORGE_ATTEMPT_NUMBER done"
"""
    async with agent_console(tmp_path, dockerd, node_timeout_seconds=6) as (c, fleet):
        lab = await c.lab("lost", train, config={"image": TEST_IMAGE})
        job_id = await submit(c, lab, "lost")
        job, node = await running_on(c, job_id)
        first = job.attempts[-1].attempt_id
        fleet[node].kill()  # the node goes silent; its container keeps running in docker
        job = await wait_state(c, job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=120)
        assert job.state == st.JOB_STATE_SUCCEEDED, job
        lost, retry = job.attempts
        assert (lost.state, lost.failure_class) == (st.JOB_STATE_FAILED, st.FAILURE_CLASS_NODE_LOST)
        assert "node lost" in lost.reason
        assert (retry.number, retry.node, job.retries_used) == (2, other(node), 1)
        assert (await list_nodes(c))[node].state == node_pb2.NODE_STATE_LOST
        # The first attempt's container is still running on the lost node ...
        (stray,) = fleet[node].containers(dockerd.client, first)
        assert stray.status == "running"
        # ... until the node comes back: the control plane's cleanup of the failed attempt, through
        # the agent executor, stops and removes it (it must not run twice).
        fleet[node].start()
        await wait_nodes(c, [node])
        await until("the stray container to be removed", lambda: _gone(fleet[node], dockerd, first), timeout=60)


async def test_drain_empties_the_node_and_new_work_goes_elsewhere(
    tmp_path: pathlib.Path, dockerd: DockerEngine, python_image: str
) -> None:
    async with agent_console(tmp_path, dockerd) as (c, fleet):
        lab = await c.lab("drained", WAIT_FOR_RELEASE, config={"image": TEST_IMAGE})
        job_id = await submit(c, lab, "drained")
        job, node = await running_on(c, job_id)
        attempt_id = job.attempts[-1].attempt_id
        r = await asyncio.to_thread(fleet[node].drain, "--grace", "20", "--wait", "60")
        assert r.returncode == 0, r.stdout + r.stderr
        assert (await list_nodes(c))[node].state == node_pb2.NODE_STATE_DRAINED
        (container,) = fleet[node].containers(dockerd.client, attempt_id) or [None]
        assert container is None or container.status == "exited"

        async def ended() -> bool:
            return (await c.get(job_id)).attempts[0].state not in (st.JOB_STATE_RUNNING, st.JOB_STATE_PENDING)

        await until("the drained attempt to end in the ledger", ended)
        first = (await c.get(job_id)).attempts[0]
        # the control plane pauses attempts on a draining node and queues them again at once
        assert first.state == st.JOB_STATE_PAUSED, first
        assert first.reason == f"paused: node {node} is draining"

        async def moved() -> bool:
            j = await c.get(job_id)
            return len(j.attempts) == 2 and j.attempts[1].state == st.JOB_STATE_RUNNING

        await until("the paused job to run again on the other node", moved)
        resumed = (await c.get(job_id)).attempts[1]
        assert (resumed.node, resumed.cause) == (other(node), 4)  # ATTEMPT_CAUSE_RESUME

        quick = await c.lab("quick", "#!/usr/bin/env bash\necho quick\n", config={"image": TEST_IMAGE})
        second = await submit(c, quick, "quick")
        done = await wait_state(c, second, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=120)
        assert done.state == st.JOB_STATE_SUCCEEDED, done
        assert done.attempts[-1].node == other(node)
