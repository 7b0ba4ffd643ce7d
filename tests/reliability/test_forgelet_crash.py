"""forgelet (the node agent of the `agent` executor) is SIGKILLed at random points under load and
restarted on the same config, state dir and port, on both nodes of a two-node docker fleet.

Jobs run as containers on the private dockerd (the harness of tests/integration/forgelet): they
keep running and reporting while their node's forgelet is dead, and the restarted forgelet finds
them again by their labels. Launches that meet a dead forgelet are retried (the agent executor
keeps the placement of a start that may have happened, so a retry never starts a second copy).
Afterwards: every job succeeded in exactly one attempt and ended once in the ledger; docker's own
event log shows one container start per attempt; every log line and metric point is stored once.
"""

from __future__ import annotations

import asyncio
import functools
import pathlib
import random
import time
from collections import Counter

import pytest
from sqlalchemy import func, select
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.job.v1 import job_spec_pb2
from starforge_api.job.v1 import job_state_pb2 as st

from control.db import models as m
from executor_svc.base import LABEL_ATTEMPT
from tests.integration.backends.docker import TEST_IMAGE, DockerEngine
from tests.integration.console import Console
from tests.integration.forgelet.fleet import agent_console
from tests.reliability.harness import (
    assert_all_succeeded_once,
    assert_reported_once,
    reporting_train,
    terminal_events,
    until,
    wait_terminal,
)

JOBS = 10
STEPS = 30
KILLS = 4


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(400)
async def test_forgelet_sigkill_under_load_loses_nothing_and_starts_nothing_twice(
    tmp_path: pathlib.Path, dockerd: DockerEngine, python_image: str
) -> None:
    since = int(time.time()) - 1
    async with agent_console(tmp_path, dockerd) as (c, fleet):
        first = await c.submit_custom(
            reporting_train(STEPS, 0.1),
            config={"image": TEST_IMAGE},
            pools=[job_spec_pb2.PoolRequest(profile="h200:4")],
        )
        spec = (await c.get(first.job_id)).spec
        job_ids = [first.job_id]
        rng = random.Random(5)
        kills = 0
        for i in range(1, JOBS):
            r = await c.jobs.SubmitJob(ctl.SubmitJobRequest(spec=spec, request_id=f"f{i}"), metadata=c.md)
            job_ids.append(r.job.job_id)
            if i % 2 or kills >= KILLS:
                continue
            if kills % 2 == 0:  # both nodes die while this job's launch is in flight
                await until(functools.partial(_dispatched, c, r.job.job_id), timeout=30, what="a dispatch")
                victims = list(fleet.values())
            else:  # one node dies at a random moment
                await asyncio.sleep(rng.uniform(0.0, 1.5))
                victims = [fleet[rng.choice(sorted(fleet))]]
            for node in victims:
                node.kill()
            kills += 1
            await asyncio.sleep(rng.uniform(0.3, 2.0))
            for node in victims:
                await asyncio.to_thread(node.start)
        jobs = await wait_terminal(
            c.channel,
            c.token,
            job_ids,
            timeout=300,
            on_timeout="\n".join(f.log_tail() for f in fleet.values()),
        )
        assert_all_succeeded_once(jobs)
        retried = await c.app.ctx.db.run(
            lambda s: s.scalar(select(func.count()).select_from(m.Attempt).where(m.Attempt.dispatch_tries > 0))
        )
        await assert_reported_once(c, c.app.ctx.db, job_ids, STEPS)
        db_url = c.app.ctx.cfg.resolved_database_url
    assert kills == KILLS
    assert retried, "no launch met a dead forgelet"
    assert sorted(terminal_events(db_url)) == sorted(job_ids)
    # docker's own record: one container start per attempt, one attempt per job
    events = dockerd.client.events(
        since=since,
        until=int(time.time()) + 1,
        decode=True,
        filters={"type": "container", "event": "start", "label": "starforge.dev/managed-by=starforge"},
    )
    starts = Counter(e["Actor"]["Attributes"][LABEL_ATTEMPT] for e in events)
    attempts = {j.attempts[0].attempt_id for j in jobs.values()}
    assert set(starts) == attempts, (sorted(starts), sorted(attempts))
    assert all(n == 1 for n in starts.values()), starts


async def _dispatched(c: Console, job_id: str) -> bool:
    """The job was claimed: its attempt exists and its launch is on its way to the node."""
    n = await c.app.ctx.db.run(
        lambda s: s.scalar(select(func.count()).select_from(m.Attempt).where(m.Attempt.job_id == job_id))
    )
    return bool(n)


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_node_dying_during_a_launch_and_staying_dead_fails_it_as_node_lost_and_the_retry_runs_elsewhere(
    tmp_path: pathlib.Path, dockerd: DockerEngine, python_image: str
) -> None:
    """Both nodes die while a launch is in flight; only the one it was not placed on comes back.
    The attempt, unconfirmed, stays SUBMITTED (never taken for running) until its node is declared
    lost; then it fails as NODE_LOST and the retry runs on the node that came back."""
    async with agent_console(tmp_path, dockerd, node_timeout_seconds=6) as (c, fleet):
        job = await c.submit_custom(
            "#!/usr/bin/env bash\necho attempt $FORGE_ATTEMPT_NUMBER on $FORGE_ATTEMPT_ID\n",
            config={"image": TEST_IMAGE},
            pools=[job_spec_pb2.PoolRequest(profile="h200:8")],
        )
        await until(lambda: _dispatched(c, job.job_id), timeout=30, what="the dispatch")
        for node in fleet.values():
            node.kill()

        async def placed() -> str:
            return (await c.get(job.job_id)).attempts[0].node

        await until(placed, timeout=60, what="the attempt's node")
        dead = await placed()
        survivor = next(n for n in fleet if n != dead)
        await asyncio.to_thread(fleet[survivor].start)
        done = await c.wait(job.job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=180)
    assert done.state == st.JOB_STATE_SUCCEEDED, done
    first, retry = done.attempts
    assert (first.state, first.failure_class, first.node) == (st.JOB_STATE_FAILED, st.FAILURE_CLASS_NODE_LOST, dead)
    assert (retry.state, retry.node) == (st.JOB_STATE_SUCCEEDED, survivor)
