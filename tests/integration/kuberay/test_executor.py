"""KubeRayExecutor against the real API server: launch, watch-driven observe, stop, cleanup, restart."""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
import time

import pytest
import yaml
from starforge_api.executor.v1 import executor_service_pb2 as ex_pb
from starforge_api.job.v1 import job_state_pb2 as st

from common import errors
from executor_svc.kuberay import names
from executor_svc.kuberay.config import KubeRayConfig
from executor_svc.kuberay.executor import KubeRayExecutor
from executor_svc.kuberay.watch import RayJobWatch, _Gone
from tests.integration.backends.kube import Kube
from tests.unit.kuberay.requests import pool, request

from .conftest import MakeExecutor, Operator, wait_state

pytestmark = pytest.mark.kube

WATCH_LATENCY = 2.0  # "within a couple of seconds"


async def test_launch_is_idempotent(executor: KubeRayExecutor, operator: Operator) -> None:
    req = request()
    first = await executor.launch(req)
    again = await executor.launch(req)
    assert not first.already_launched
    assert again.already_launched
    assert again.backend_handle == first.backend_handle
    assert again.out_dir == first.out_dir
    assert operator.names() == [names.rayjob_name(req.attempt_id)]


async def test_concurrent_launches_create_one_object(make_executor: MakeExecutor, operator: Operator) -> None:
    a, b = await make_executor(synced=False), await make_executor(synced=False)
    req = request()
    results = await asyncio.gather(a.launch(req), b.launch(req), a.launch(req))
    assert sorted(r.already_launched for r in results) == [False, True, True]
    assert operator.names() == [names.rayjob_name(req.attempt_id)]


async def test_a_new_executor_finds_its_attempts_by_label(
    make_executor: MakeExecutor, kube_config: KubeRayConfig
) -> None:
    first = await make_executor()
    reqs = [request(), request([pool("h200", 8, nodes=2)])]
    for r in reqs:
        await first.launch(r)
    await first.close()
    restarted = await make_executor()
    found = await restarted.list_attempts()
    assert [o.attempt_id for o in found] == sorted(r.attempt_id for r in reqs)
    assert all(o.state == st.JOB_STATE_PENDING for o in found)
    other = await make_executor(dataclasses.replace(kube_config, executor_name="other-fleet"))
    assert await other.list_attempts() == []
    assert (await restarted.launch(reqs[0])).already_launched


async def test_watch_follows_the_operators_status(executor: KubeRayExecutor, operator: Operator) -> None:
    req = request()
    await executor.launch(req)
    name = names.rayjob_name(req.attempt_id)
    (obs,) = await executor.observe([req.attempt_id])
    assert obs.state == st.JOB_STATE_PENDING
    assert obs.backend_handle.endswith(name)

    operator.status(name, jobDeploymentStatus="Initializing", startTime="2026-11-29T10:00:00Z")
    obs, _ = await wait_state(executor, req.attempt_id, st.JOB_STATE_PENDING)
    operator.status(name, jobDeploymentStatus="Running", jobStatus="RUNNING", rayClusterName=f"{name}-abcde")
    obs, took = await wait_state(executor, req.attempt_id, st.JOB_STATE_RUNNING)
    assert took < WATCH_LATENCY
    assert obs.node == f"{name}-abcde"
    assert obs.start_time is not None
    assert executor.watch.synced
    assert executor.watch.get(name) is not None
    operator.status(
        name,
        jobDeploymentStatus="Complete",
        jobStatus="SUCCEEDED",
        endTime="2026-11-29T10:05:00Z",
        message="Job finished successfully.",
    )
    obs, took = await wait_state(executor, req.attempt_id, st.JOB_STATE_SUCCEEDED)
    assert took < WATCH_LATENCY
    assert obs.exit_code == 0
    assert obs.end_time is not None
    assert obs.end_time.isoformat() == "2026-11-29T10:05:00+00:00"
    assert "jobDeploymentStatus=Complete jobStatus=SUCCEEDED" in obs.message


async def test_failed_and_suspended(executor: KubeRayExecutor, operator: Operator) -> None:
    failed, suspended = request(), request()
    await executor.launch(failed)
    await executor.launch(suspended)
    operator.status(
        names.rayjob_name(failed.attempt_id),
        jobDeploymentStatus="Failed",
        jobStatus="FAILED",
        reason="AppFailed",
        message="Job entrypoint command failed with exit code 97, last available logs:\n"
        "starforge: capsule integrity check failed: workspace/train.sh: missing",
    )
    operator.status(names.rayjob_name(suspended.attempt_id), jobDeploymentStatus="Suspended")
    obs, _ = await wait_state(executor, failed.attempt_id, st.JOB_STATE_FAILED)
    assert obs.exit_code == 97
    assert obs.failure_class == st.FAILURE_CLASS_PRECHECK
    assert obs.log_tail == ("starforge: capsule integrity check failed: workspace/train.sh: missing",)
    await asyncio.sleep(0.3)
    (obs,) = await executor.observe([suspended.attempt_id])
    assert obs.state == st.JOB_STATE_PENDING
    assert "Suspended" in obs.message
    assert "suspended" in obs.message


async def test_observe_without_the_watch_falls_back_to_get(make_executor: MakeExecutor, operator: Operator) -> None:
    ex = await make_executor()
    req = request()
    await ex.launch(req)
    await asyncio.to_thread(ex.watch.stop)
    assert not ex.watch.synced
    operator.status(names.rayjob_name(req.attempt_id), jobDeploymentStatus="Running", jobStatus="RUNNING")
    (obs,) = await ex.observe([req.attempt_id])
    assert obs.state == st.JOB_STATE_RUNNING
    assert (await ex.observe(["j0000000000000.9"]))[0].not_found


def test_an_expired_resource_version_means_list_again(executor: KubeRayExecutor) -> None:
    watch = RayJobWatch(executor.kube, executor.selector, 5)
    with pytest.raises(_Gone):  # the server's 410 Gone arrives as an ERROR event inside the stream
        watch._watch("1")
    assert not watch.synced


async def test_stop_deletes_and_a_second_stop_is_false(
    make_executor: MakeExecutor, executor: KubeRayExecutor, operator: Operator
) -> None:
    req = request()
    await executor.launch(req)
    name = names.rayjob_name(req.attempt_id)
    operator.status(name, jobDeploymentStatus="Running", jobStatus="RUNNING")
    await wait_state(executor, req.attempt_id, st.JOB_STATE_RUNNING)
    assert await executor.stop(req.attempt_id, 5) is True
    deleting = operator.get(name)
    assert deleting is not None
    assert deleting["metadata"]["deletionTimestamp"]
    assert deleting["metadata"]["finalizers"] == ["foregroundDeletion"]
    (obs,) = await executor.observe([req.attempt_id])
    assert obs.state == st.JOB_STATE_STOPPED
    assert await executor.stop(req.attempt_id, 5) is False  # already stopping
    operator.collect_garbage(name)
    deadline = time.monotonic() + 10
    while operator.get(name) is not None and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert operator.get(name) is None
    # the executor learns of the deletion from its watch, which may trail the API server a little
    while True:
        (obs,) = await executor.observe([req.attempt_id])
        if "deleted by StarForge" in obs.message or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.02)
    assert obs.state == st.JOB_STATE_STOPPED
    assert "deleted by StarForge" in obs.message
    assert await executor.stop(req.attempt_id, 5) is False
    assert await executor.cleanup(req.attempt_id) == 0
    assert (await executor.launch(req)).already_launched  # a stopped attempt never starts again
    assert operator.get(name) is None
    restarted = await make_executor()
    assert (await restarted.observe([req.attempt_id]))[0].not_found


async def test_stop_and_cleanup_of_unknown_attempts(executor: KubeRayExecutor) -> None:
    assert await executor.stop("j0000000000000.1", 5) is False
    assert await executor.cleanup("j0000000000000.1") == 0
    (obs,) = await executor.observe(["j0000000000000.1"])
    assert obs.not_found


async def test_cleanup_refuses_a_running_attempt_then_deletes_it(executor: KubeRayExecutor, operator: Operator) -> None:
    req = request()
    await executor.launch(req)
    name = names.rayjob_name(req.attempt_id)
    with pytest.raises(errors.FailedPrecondition, match="still runs"):
        await executor.cleanup(req.attempt_id)
    operator.status(name, jobDeploymentStatus="Complete", jobStatus="SUCCEEDED")
    await wait_state(executor, req.attempt_id, st.JOB_STATE_SUCCEEDED)
    assert await executor.cleanup(req.attempt_id) == 1
    # still being deleted (the garbage collector has not run): observe answers what it remembered
    (obs,) = await executor.observe([req.attempt_id])
    assert (obs.state, obs.message) == (
        st.JOB_STATE_SUCCEEDED,
        "jobDeploymentStatus=Complete jobStatus=SUCCEEDED (cleaned up)",
    )
    operator.collect_garbage(name)
    for _ in range(100):
        if operator.get(name) is None:
            break
        await asyncio.sleep(0.02)
    assert operator.get(name) is None
    assert await executor.cleanup(req.attempt_id) == 0
    (obs,) = await executor.observe([req.attempt_id])
    assert obs.state == st.JOB_STATE_SUCCEEDED
    assert "cleaned up" in obs.message


async def test_describe(executor: KubeRayExecutor, operator: Operator) -> None:
    caps = await executor.describe()
    assert caps.kind == "kuberay"
    assert caps.runtime == "ray"
    assert caps.capabilities == {
        ex_pb.EXECUTOR_CAPABILITY_MULTI_POOL,
        ex_pb.EXECUTOR_CAPABILITY_MULTI_NODE,
        ex_pb.EXECUTOR_CAPABILITY_GPUS,
        ex_pb.EXECUTOR_CAPABILITY_IMAGES,
        ex_pb.EXECUTOR_CAPABILITY_PAUSE,
    }
    inv = {i.series: i for i in caps.inventory}
    assert (inv["h200"].nodes, inv["h200"].gpus_per_node, inv["h200"].free_gpus) == (2, 8, 16)
    running, done = request([pool("h200", 8)]), request([pool("h200", 8)])
    await executor.launch(running)
    await executor.launch(done)
    operator.status(names.rayjob_name(done.attempt_id), jobDeploymentStatus="Complete", jobStatus="SUCCEEDED")
    await wait_state(executor, done.attempt_id, st.JOB_STATE_SUCCEEDED)
    inv = {i.series: i for i in (await executor.describe()).inventory}
    assert inv["h200"].free_gpus == 8
    assert inv["h100"].free_gpus == 16


async def test_secret_mode_needs_the_core_api(
    make_executor: MakeExecutor, kube_config: KubeRayConfig, operator: Operator
) -> None:
    ex = await make_executor(dataclasses.replace(kube_config, use_secret_for_token=True))
    with pytest.raises(errors.Unavailable, match=r"serves no core/v1 Secrets.*use_secret_for_token: false"):
        await ex.launch(request())
    assert operator.names() == []


async def test_unreachable_api_is_unavailable(
    make_executor: MakeExecutor, kube: Kube, kube_config: KubeRayConfig, tmp_path: pathlib.Path
) -> None:
    doc = yaml.safe_load(kube.kubeconfig.read_text())
    doc["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:9"  # discard port: nothing listens
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    ex = await make_executor(dataclasses.replace(kube_config, kubeconfig=str(path)), synced=False)
    for call in (ex.describe(), ex.launch(request()), ex.observe(["j0000000000000.1"]), ex.list_attempts()):
        with pytest.raises(errors.Unavailable) as info:
            await call
        assert "https://127.0.0.1:9 cannot be reached" in info.value.message
        assert "Connection refused" in info.value.message


@pytest.mark.parametrize(
    ("content", "match"),
    [(None, "does not exist"), ("clusters: [}", "cannot load the Kubernetes client configuration")],
)
async def test_bad_kubeconfig_is_unavailable(
    kube_config: KubeRayConfig, tmp_path: pathlib.Path, content: str | None, match: str
) -> None:
    path = tmp_path / "kubeconfig"
    if content is not None:
        path.write_text(content)
    with pytest.raises(errors.Unavailable, match=match):
        await KubeRayExecutor.create(dataclasses.replace(kube_config, kubeconfig=str(path)))


async def test_the_image_digest_is_read_from_the_head_pod(executor: KubeRayExecutor, operator: Operator) -> None:
    """This API server has no Pods (no kubelet, no core API): the executor asks for the head pod
    KubeRay names in the status, and says why the digest is unresolved instead of leaving it empty.
    (The pod's imageID itself is parsed in tests/unit/kuberay/test_images.py.)"""
    req = request()
    launched = await executor.launch(req)
    assert launched.image_digest == ""  # not known before the head pod runs
    name = names.rayjob_name(req.attempt_id)
    operator.status(name, jobDeploymentStatus="Running", jobStatus="RUNNING")
    obs, _ = await wait_state(executor, req.attempt_id, st.JOB_STATE_RUNNING)
    assert obs.image_digest == ""  # no head pod named yet: nothing to ask
    head = f"{name}-head-x7k2p"
    operator.status(name, rayClusterStatus={"head": {"podName": head}})
    deadline = time.monotonic() + 10
    while True:  # until the watch has delivered the status naming the head pod
        (obs,) = await executor.observe([req.attempt_id])
        if obs.image_digest or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    assert obs.state == st.JOB_STATE_RUNNING
    assert obs.image_digest.startswith(f"unresolved:read Pod {operator.namespace}/{head}: "), obs.image_digest
    assert "serves no core/v1 Pods" in obs.image_digest
    operator.status(name, jobDeploymentStatus="Complete", jobStatus="SUCCEEDED")
    obs, _ = await wait_state(executor, req.attempt_id, st.JOB_STATE_SUCCEEDED)
    assert obs.image_digest.startswith("unresolved:")
