"""The Executor contract (executor_svc/base.py), checked on every kind against its real backend.

Parametrized over local (process and docker runtimes), agent (a real forgelet node), kuberay
(the real Kubernetes API server; the test plays the KubeRay operator) and slurm (the real test
cluster). The harnesses, and which backend each kind can restart here, are in
conformance_kinds.py.
"""

from __future__ import annotations

import asyncio
import pathlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import pytest
from starforge_api.executor.v1 import executor_service_pb2 as ex_pb
from starforge_api.job.v1 import job_state_pb2 as st

from common import errors, ids
from executor_svc.base import LABEL_ATTEMPT
from executor_svc.kuberay import names
from tests.integration.blob_server import BlobServer
from tests.integration.executors.conformance_kinds import (
    RUN_TIMEOUT,
    KindHarness,
    KubeRayHarness,
    LocalHarness,
    SlurmHarness,
    agent_harness,
)
from tests.integration.executors.launch_requests import wait_for

T = TypeVar("T")

KINDS = [
    pytest.param("local-process", id="local-process"),
    pytest.param("local-docker", id="local-docker", marks=pytest.mark.docker),
    pytest.param("agent", id="agent", marks=[pytest.mark.docker, pytest.mark.slow]),
    pytest.param("kuberay", id="kuberay", marks=pytest.mark.kube),
    pytest.param("slurm", id="slurm", marks=[pytest.mark.slurm, pytest.mark.slow]),
]
# Kinds whose backend this machine can restart (conformance_kinds.py says why the others cannot).
RESTARTABLE = [p for p in KINDS if p.values[0] in ("agent", "kuberay")]


@pytest.fixture(params=KINDS)
async def kind(request: pytest.FixtureRequest, tmp_path: pathlib.Path, blobs: BlobServer) -> AsyncIterator[KindHarness]:
    name = request.param
    harness: KindHarness
    if name == "agent":
        engine, image = request.getfixturevalue("dockerd"), request.getfixturevalue("python_image")
        async with agent_harness(tmp_path, blobs, engine, image) as agent:
            agent.ex = await agent.start()
            try:
                yield agent
            finally:
                await agent.close()
        return
    if name == "local-process":
        harness = LocalHarness(tmp_path, blobs, None, "")
    elif name == "local-docker":
        engine, image = request.getfixturevalue("dockerd"), request.getfixturevalue("python_image")
        harness = LocalHarness(tmp_path, blobs, engine, image)
    elif name == "kuberay":
        harness = KubeRayHarness(request.getfixturevalue("kube"), f"c-{uuid.uuid4().hex[:10]}")
    else:
        info = request.getfixturevalue("slurm_cluster")
        harness = SlurmHarness(info, pathlib.Path(info.staging_dir) / f"conf-{uuid.uuid4().hex[:10]}", blobs)
    harness.ex = await harness.start()
    try:
        yield harness
    finally:
        await stop_all(harness)
        await harness.close()


async def stop_all(kind: KindHarness) -> None:
    for obs in await kind.ex.list_attempts():
        if obs.state in (st.JOB_STATE_PENDING, st.JOB_STATE_RUNNING):
            await kind.ex.stop(obs.attempt_id, 1.0)


async def test_the_same_launch_twice_gives_one_attempt(kind: KindHarness) -> None:
    req = kind.request()
    first, again = await kind.ex.launch(req), await kind.ex.launch(req)
    assert not first.already_launched
    assert again.already_launched
    assert again.backend_handle == first.backend_handle
    listed = [o for o in await kind.ex.list_attempts() if o.attempt_id == req.attempt_id]
    assert len(listed) == 1
    if isinstance(kind, KubeRayHarness):
        assert kind.operator.names() == [names.rayjob_name(req.attempt_id)]
        return
    await kind.until_started(req, first.out_dir)
    assert (await kind.ex.launch(req)).already_launched  # also once it runs
    out = kind.out_dir(req, first.out_dir)
    assert out is not None
    assert out.joinpath("starts").read_text().split() == [req.attempt_id]  # started once


async def test_stop_of_an_attempt_that_is_gone_succeeds(kind: KindHarness) -> None:
    never = ids.attempt_id(ids.new_job_id(), 1)
    assert await kind.ex.stop(never, 1.0) is False
    req = kind.request()
    launched = await kind.ex.launch(req)
    await kind.until_running(req.attempt_id)
    assert await kind.ex.stop(req.attempt_id, 2.0) is True
    ended = await wait_for(kind.ex, req.attempt_id, timeout=RUN_TIMEOUT)
    if isinstance(kind, KubeRayHarness):  # the operator's garbage collector removes it at last
        kind.operator.collect_garbage(names.rayjob_name(req.attempt_id))
    assert ended.state == st.JOB_STATE_STOPPED, ended
    assert await kind.ex.stop(req.attempt_id, 1.0) is False  # stopped already
    await cleanup_when_allowed(kind, req.attempt_id)
    assert await kind.ex.stop(req.attempt_id, 1.0) is False  # and cleaned up
    assert launched.backend_handle


async def cleanup_when_allowed(kind: KindHarness, attempt_id: str) -> int:
    """Cleanup, retried while the backend still winds the attempt down (FailedPrecondition)."""
    for _ in range(100):
        try:
            return await kind.ex.cleanup(attempt_id)
        except errors.FailedPrecondition:
            await asyncio.sleep(0.2)
    return await kind.ex.cleanup(attempt_id)


async def test_cleanup_never_touches_the_out_dir(kind: KindHarness) -> None:
    req = kind.request()
    launched = await kind.ex.launch(req)
    await kind.until_started(req, launched.out_dir)
    with pytest.raises(errors.FailedPrecondition):
        await kind.ex.cleanup(req.attempt_id)  # refused while it runs
    ended = await kind.release(req, launched.out_dir)
    assert ended.state == st.JOB_STATE_SUCCEEDED, ended
    assert await cleanup_when_allowed(kind, req.attempt_id) >= 1
    assert await kind.ex.cleanup(req.attempt_id) == 0  # nothing left the second time
    out = kind.out_dir(req, launched.out_dir)
    if out is None:  # kuberay: the out dir is a claim the executor never makes or deletes
        assert isinstance(kind, KubeRayHarness)
        kind.operator.collect_garbage(names.rayjob_name(req.attempt_id))  # Foreground deletion ends
        assert kind.operator.names() == []
        return
    assert out.joinpath("checkpoint").read_text() == "kept\n"
    assert not out.joinpath("found").exists()
    assert out.joinpath("starts").read_text().split() == [req.attempt_id]


async def test_list_and_observe_after_an_executor_restart(kind: KindHarness) -> None:
    running, done = kind.request(), kind.request()
    launched = await kind.ex.launch(running)
    done_launched = await kind.ex.launch(done)
    await kind.until_running(running.attempt_id)
    await kind.until_running(done.attempt_id)
    await kind.release(done, done_launched.out_dir)

    ex = await kind.restart_executor()
    listed = {o.attempt_id: o for o in await ex.list_attempts()}
    assert listed[running.attempt_id].state == st.JOB_STATE_RUNNING, listed
    assert listed[done.attempt_id].state == st.JOB_STATE_SUCCEEDED, listed
    (obs, finished) = await ex.observe([running.attempt_id, done.attempt_id])
    assert (obs.state, finished.state) == (st.JOB_STATE_RUNNING, st.JOB_STATE_SUCCEEDED)
    assert obs.backend_handle == launched.backend_handle
    assert (await ex.launch(running)).already_launched  # still one attempt after the restart
    assert await ex.stop(running.attempt_id, 2.0) is True
    assert (await wait_for(ex, running.attempt_id, timeout=RUN_TIMEOUT)).state == st.JOB_STATE_STOPPED


@pytest.mark.parametrize("kind", RESTARTABLE, indirect=True)
async def test_observe_after_a_backend_restart(kind: KindHarness) -> None:
    req = kind.request()
    launched = await kind.ex.launch(req)
    await kind.until_running(req.attempt_id)
    await kind.restart_backend()
    # A backend just back may still refuse for a moment (the API server answers 429/503 until it is
    # ready): the executor says Unavailable then, as the contract asks, and answers once it is back.
    obs = await once_back(lambda: wait_for(kind.ex, req.attempt_id, st.JOB_STATE_RUNNING, timeout=RUN_TIMEOUT))
    assert obs.backend_handle == launched.backend_handle
    listed = await once_back(kind.ex.list_attempts)
    assert req.attempt_id in {o.attempt_id for o in listed}
    ended = await kind.release(req, launched.out_dir)
    assert ended.state == st.JOB_STATE_SUCCEEDED, ended


async def once_back(call: Callable[[], Awaitable[T]]) -> T:
    """`call()`, retried while the backend answers Unavailable (for at most RUN_TIMEOUT)."""
    deadline = time.monotonic() + RUN_TIMEOUT
    while True:
        try:
            return await call()
        except errors.Unavailable:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


async def test_capabilities_are_honest(kind: KindHarness) -> None:
    caps = (await kind.ex.describe()).capabilities
    two_pools = kind.request(pools=2)
    if ex_pb.EXECUTOR_CAPABILITY_MULTI_POOL in caps:
        assert not (await kind.ex.launch(two_pools)).already_launched
        await kind.ex.stop(two_pools.attempt_id, 1.0)
    else:
        with pytest.raises(errors.InvalidArgument, match="single-pool"):
            await kind.ex.launch(two_pools)
        assert two_pools.attempt_id not in {o.attempt_id for o in await kind.ex.list_attempts()}
    if isinstance(kind, KubeRayHarness):
        await check_kuberay_pause(kind, caps)
        return
    # PAUSE: FORGE_OUT_DIR outlives the attempt, so the job's next attempt finds its checkpoint.
    assert ex_pb.EXECUTOR_CAPABILITY_PAUSE in caps
    first = kind.request()
    launched = await kind.ex.launch(first)
    await kind.until_started(first, launched.out_dir)
    await kind.ex.stop(first.attempt_id, 2.0)
    await wait_for(kind.ex, first.attempt_id, timeout=RUN_TIMEOUT)
    await cleanup_when_allowed(kind, first.attempt_id)
    second = kind.request(job_id=first.job_id, attempt_number=2)
    relaunched = await kind.ex.launch(second)
    await kind.until_started(second, relaunched.out_dir)
    out = kind.out_dir(second, relaunched.out_dir)
    assert out is not None and out == kind.out_dir(first, launched.out_dir)
    assert out.joinpath("checkpoint").read_text() == "kept\n"
    assert out.joinpath("found").read_text().split() == [second.attempt_id]  # the first one's, found
    assert out.joinpath("starts").read_text().split() == [first.attempt_id, second.attempt_id]


async def check_kuberay_pause(kind: KubeRayHarness, caps: frozenset[int]) -> None:
    """PAUSE exactly when FORGE_OUT_DIR is a volume claim that outlives the pods."""
    assert ex_pb.EXECUTOR_CAPABILITY_PAUSE in caps and kind.cfg.out_volume_claim
    req = kind.request()
    await kind.ex.launch(req)
    obj = kind.operator.get(names.rayjob_name(req.attempt_id))
    assert obj is not None and obj["metadata"]["labels"][LABEL_ATTEMPT]
    head = obj["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    claims = [v["persistentVolumeClaim"]["claimName"] for v in head["volumes"] if "persistentVolumeClaim" in v]
    assert claims == [kind.cfg.out_volume_claim]
    without = KubeRayHarness(kind.kube, f"c-{uuid.uuid4().hex[:10]}", out_volume_claim="")
    without.ex = await without.start()
    try:
        assert ex_pb.EXECUTOR_CAPABILITY_PAUSE not in (await without.ex.describe()).capabilities
    finally:
        await without.close()
