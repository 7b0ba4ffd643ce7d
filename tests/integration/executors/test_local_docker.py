"""The local executor with the `docker` runtime, against a real dockerd (session fixture)."""

from __future__ import annotations

import asyncio
import json
import pathlib
import traceback
from collections.abc import AsyncIterator

import docker
import pytest
from starforge_api.executor.v1 import executor_service_pb2 as ex_pb
from starforge_api.job.v1 import job_state_pb2 as st

from common import errors, ids
from executor_svc.base import LABEL_ATTEMPT, LABEL_JOB, LABEL_MANAGED
from executor_svc.local import DockerConfig, LocalConfig, LocalExecutor, SeriesConfig
from executor_svc.local.docker_runtime import LABEL_GPUS, container_name
from tests.integration.backends.docker import DockerEngine
from tests.integration.blob_server import BlobServer
from tests.integration.executors.launch_requests import (
    DUMP_ENV,
    RECORD_START,
    WAIT_FOR_RELEASE,
    launch_request,
    read_env,
    shell_capsule,
    stop_everything,
    verified_capsule,
    wait_for,
    wait_for_log,
)

pytestmark = pytest.mark.docker


def config(state_dir: pathlib.Path, engine: DockerEngine) -> LocalConfig:
    return LocalConfig(
        state_dir=state_dir,
        runtime="docker",
        node_name="node-d",
        inventory=[SeriesConfig("cpu", gpus=0, slots=4), SeriesConfig("h200", gpus=8, real_gpus=False)],
        docker=DockerConfig(base_url=engine.base_url),
    )


@pytest.fixture
async def executor(tmp_path: pathlib.Path, dockerd: DockerEngine, python_image: str) -> AsyncIterator[LocalExecutor]:
    ex = await LocalExecutor.create(config(tmp_path / "state", dockerd))
    try:
        yield ex
    finally:
        await stop_everything(ex)
        await ex.close()


def containers_of(engine: DockerEngine, attempt_id: str) -> list[docker.models.containers.Container]:
    found: list[docker.models.containers.Container] = engine.client.containers.list(
        all=True, filters={"label": f"{LABEL_ATTEMPT}={attempt_id}"}
    )
    return found


async def test_container_runs_the_capsule_to_success(
    executor: LocalExecutor, blobs: BlobServer, dockerd: DockerEngine, python_image: str
) -> None:
    script = DUMP_ENV + 'echo "hello from $(hostname) in $(pwd)"\npython3 -c "import numpy; print(numpy.__name__)"\n'
    req = launch_request(
        blobs,
        shell_capsule(script, {"train.sh": (b"#!/bin/sh\n", True)}),
        image=python_image,
        series="h200",
        gpus=2,
        env={"MY_SETTING": "x"},
        secret_env={"HF_TOKEN": "hf-secret"},
    )
    result = await executor.launch(req)
    image = dockerd.client.images.get(python_image)
    assert result.image_digest == image.id
    assert not result.already_launched

    obs = await wait_for(executor, req.attempt_id, timeout=60)
    assert (obs.state, obs.exit_code) == (st.JOB_STATE_SUCCEEDED, 0), obs
    assert "numpy" in obs.log_tail
    assert obs.start_time is not None
    assert obs.end_time is not None
    assert any(line.endswith("in /forge/workspace") for line in obs.log_tail)

    env = read_env(pathlib.Path(result.out_dir) / "env-1.txt")
    assert env["FORGE_CAPSULE_DIR"] == "/forge/capsule"
    assert env["FORGE_WORKSPACE_DIR"] == "/forge/workspace"
    assert env["FORGE_OUT_DIR"] == "/forge/out"
    assert env["FORGE_SCRATCH_DIR"] == "/forge/scratch"
    assert env["FORGE_CAPSULE_SHA256"] == req.capsule.capsule_digest
    assert "FORGE_INGEST_TOKEN" not in env  # not even in `docker inspect`: a 0600 file in scratch
    assert env["FORGE_INGEST_TOKEN_FILE"] == "/forge/scratch/.forge-ingest-token"
    assert env["FORGE_ATTEMPT_ID"] == req.attempt_id
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert env["MY_SETTING"] == "x"
    assert env["HF_TOKEN"] == "hf-secret"

    (container,) = containers_of(dockerd, req.attempt_id)
    assert container.name == container_name(req.attempt_id)
    assert container.id == result.backend_handle
    labels = container.labels
    assert labels[LABEL_JOB] == req.job_id
    assert labels[LABEL_MANAGED] == "starforge"
    assert labels[LABEL_GPUS] == "0,1"
    assert labels["starforge.dev/owner"] == "tester"
    assert "hf-secret" not in json.dumps(labels)
    assert req.ingest.token not in json.dumps(container.attrs["Config"])  # docker inspect shows no run token
    host = container.attrs["HostConfig"]
    assert host["NetworkMode"] == "host"
    assert not host.get("DeviceRequests")
    mounts = {m["Destination"]: m for m in container.attrs["Mounts"]}
    assert mounts["/forge/capsule"]["RW"] is False
    assert mounts["/forge/out"]["RW"] is True


async def test_exit_code_stop_and_unknown(executor: LocalExecutor, blobs: BlobServer, python_image: str) -> None:
    failing = launch_request(blobs, shell_capsule("echo 'bad things' >&2\nexit 3\n"), image=python_image)
    sleeping = launch_request(blobs, shell_capsule("echo ready\nsleep 600\n"), image=python_image)
    await asyncio.gather(executor.launch(failing), executor.launch(sleeping))

    obs = await wait_for(executor, failing.attempt_id, timeout=60)
    assert (obs.state, obs.exit_code) == (st.JOB_STATE_FAILED, 3)
    assert obs.log_tail == ["bad things"]

    await wait_for_log(executor, sleeping.attempt_id, "ready")
    assert await executor.stop(sleeping.attempt_id, 2.0) is True
    obs = await wait_for(executor, sleeping.attempt_id)
    assert obs.state == st.JOB_STATE_STOPPED
    assert "exited" in obs.message
    assert await executor.stop(sleeping.attempt_id, 2.0) is False
    missing = ids.attempt_id(ids.new_job_id(), 1)
    assert await executor.stop(missing, 1.0) is False
    assert (await executor.observe([missing]))[0].not_found


async def test_launch_is_idempotent_one_container(
    executor: LocalExecutor, blobs: BlobServer, dockerd: DockerEngine, python_image: str
) -> None:
    req = launch_request(blobs, shell_capsule(RECORD_START + WAIT_FOR_RELEASE), image=python_image)
    results = await asyncio.gather(*(executor.launch(req) for _ in range(4)))
    assert sorted(r.already_launched for r in results) == [False, True, True, True]
    assert len(containers_of(dockerd, req.attempt_id)) == 1
    out = pathlib.Path(results[0].out_dir)
    (out / "release").touch()
    assert (await wait_for(executor, req.attempt_id, timeout=60)).state == st.JOB_STATE_SUCCEEDED
    assert (out / "starts").read_text().count(req.attempt_id) == 1


async def test_missing_image_is_a_clear_failed_precondition(
    executor: LocalExecutor, blobs: BlobServer, dockerd: DockerEngine
) -> None:
    req = launch_request(blobs, shell_capsule("true\n"), image="registry.local/never-pulled:v1")
    with pytest.raises(errors.FailedPrecondition) as err:
        await executor.launch(req)
    assert err.value.message == (
        "image registry.local/never-pulled:v1 is not present on this node (pull it or choose another)"
    )
    assert err.value.metadata["failure_class"] == "IMAGE"
    assert containers_of(dockerd, req.attempt_id) == []
    assert not executor.layout.attempt(req.attempt_id).root.exists()


async def test_containers_are_found_again_after_a_restart(
    tmp_path: pathlib.Path, blobs: BlobServer, dockerd: DockerEngine, python_image: str
) -> None:
    first = await LocalExecutor.create(config(tmp_path / "state", dockerd))
    req = launch_request(
        blobs, shell_capsule(WAIT_FOR_RELEASE + "echo released\n"), image=python_image, series="h200", gpus=3
    )
    result = await first.launch(req)
    await wait_for(first, req.attempt_id, st.JOB_STATE_RUNNING, timeout=60)
    await first.close()
    # Even without its record on disk, the container's labels are enough.
    first.layout.attempt(req.attempt_id).record.unlink()

    second = await LocalExecutor.create(config(tmp_path / "state", dockerd))
    try:
        (obs,) = await second.observe([req.attempt_id])
        assert obs.state == st.JOB_STATE_RUNNING
        assert obs.backend_handle == result.backend_handle
        assert req.attempt_id in {o.attempt_id for o in await second.list_attempts()}
        assert {i.series: i.free_gpus for i in (await second.describe()).inventory}["h200"] == 5
        assert (await second.launch(req)).already_launched
        assert len(containers_of(dockerd, req.attempt_id)) == 1

        (pathlib.Path(result.out_dir) / "release").touch()
        obs = await wait_for(second, req.attempt_id, timeout=60)
        assert obs.state == st.JOB_STATE_SUCCEEDED
        assert obs.log_tail == ["released"]
    finally:
        await stop_everything(second)
        await second.close()


async def test_cleanup_removes_the_container_but_keeps_out_and_logs(
    executor: LocalExecutor, blobs: BlobServer, dockerd: DockerEngine, python_image: str
) -> None:
    script = WAIT_FOR_RELEASE + 'echo ckpt > "$FORGE_OUT_DIR/ckpt"\necho "all done"\n'
    req = launch_request(blobs, shell_capsule(script, {"w.txt": b"w"}), image=python_image)
    result = await executor.launch(req)
    await wait_for(executor, req.attempt_id, st.JOB_STATE_RUNNING, timeout=60)
    with pytest.raises(errors.FailedPrecondition, match="still runs"):
        await executor.cleanup(req.attempt_id)
    out = pathlib.Path(result.out_dir)
    (out / "release").touch()
    await wait_for(executor, req.attempt_id, timeout=60)

    assert await executor.cleanup(req.attempt_id) == 5  # container, capsule, datasets, workspace, scratch
    assert containers_of(dockerd, req.attempt_id) == []
    attempt = executor.layout.attempt(req.attempt_id)
    assert not attempt.scratch.exists()
    assert (out / "ckpt").read_text() == "ckpt\n"
    assert attempt.log.read_text().strip() == "all done"
    (obs,) = await executor.observe([req.attempt_id])
    assert (obs.state, obs.exit_code, obs.log_tail) == (st.JOB_STATE_SUCCEEDED, 0, ["all done"])
    assert await executor.cleanup(req.attempt_id) == 0


async def test_concurrent_launches_never_share_a_gpu(
    executor: LocalExecutor, blobs: BlobServer, dockerd: DockerEngine, python_image: str
) -> None:
    capsule = shell_capsule(WAIT_FOR_RELEASE)
    reqs = [launch_request(blobs, capsule, image=python_image, series="h200", gpus=1) for _ in range(11)]
    results = await asyncio.gather(*(executor.launch(r) for r in reqs), return_exceptions=True)
    ok = [r for r, res in zip(reqs, results, strict=True) if not isinstance(res, BaseException)]
    others = [
        "".join(traceback.format_exception(res))
        for res in results
        if isinstance(res, BaseException) and not isinstance(res, errors.ResourceExhausted)
    ]
    assert not others, "only ResourceExhausted may refuse a launch here:\n" + "\n".join(others)
    assert len(ok) == 8
    labels = [containers_of(dockerd, r.attempt_id)[0].labels[LABEL_GPUS] for r in ok]
    assert sorted(int(g) for g in labels) == list(range(8))
    caps = await executor.describe()
    assert ex_pb.EXECUTOR_CAPABILITY_IMAGES in caps.capabilities
    assert caps.runtime == "docker"
    assert {i.series: i.free_gpus for i in caps.inventory}["h200"] == 0


async def test_real_bootstrap_runs_in_the_image(executor: LocalExecutor, blobs: BlobServer, python_image: str) -> None:
    """The real capsule/bootstrap.sh verifies the capsule with the image's own Python."""
    job_id = ids.new_job_id()
    runner = "import os, sys\nprint('runner on', sys.version.split()[0], 'for', os.environ['FORGE_JOB_ID'])\n"
    bundle = verified_capsule(runner, {"train.sh": (b"#!/bin/sh\n", True)}, job_id=job_id, attempt_id=f"{job_id}.1")
    req = launch_request(blobs, bundle, job_id=job_id, image=python_image)
    await executor.launch(req)
    obs = await wait_for(executor, req.attempt_id, timeout=60)
    assert obs.state == st.JOB_STATE_SUCCEEDED, obs.log_tail
    assert obs.log_tail == [f"runner on 3.11.2 for {job_id}"]


async def test_real_gpus_are_requested_from_the_engine(
    tmp_path: pathlib.Path, blobs: BlobServer, dockerd: DockerEngine, python_image: str
) -> None:
    """With real_gpus the container asks the engine for its GPUs; this CPU engine has no GPU
    driver, so the launch fails cleanly: nothing left behind, the GPUs free again."""
    cfg = config(tmp_path / "state", dockerd)
    cfg = LocalConfig(
        state_dir=cfg.state_dir,
        runtime="docker",
        inventory=[SeriesConfig("h100", gpus=[4, 5, 6, 7], real_gpus=True)],
        docker=cfg.docker,
    )
    ex = await LocalExecutor.create(cfg)
    try:
        req = launch_request(blobs, shell_capsule("true\n"), image=python_image, series="h100", gpus=2)
        with pytest.raises(errors.FailedPrecondition, match=r"refused to start .*(device driver|gpu)"):
            await ex.launch(req)
        assert containers_of(dockerd, req.attempt_id) == []
        assert not ex.layout.attempt(req.attempt_id).root.exists()
        assert {i.series: i.free_gpus for i in (await ex.describe()).inventory} == {"h100": 4}
    finally:
        await ex.close()


async def test_an_unreachable_engine_is_unavailable(tmp_path: pathlib.Path) -> None:
    cfg = LocalConfig(
        state_dir=tmp_path / "state",
        runtime="docker",
        docker=DockerConfig(base_url=f"unix://{tmp_path}/no-such-docker.sock"),
    )
    with pytest.raises(errors.Unavailable, match="cannot reach the Docker engine"):
        await LocalExecutor.create(cfg)
