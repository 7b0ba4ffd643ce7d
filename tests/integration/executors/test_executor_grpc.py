"""`starforge-executor --kind local` as a real process, called over gRPC like the control plane does."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from starforge_api.executor.v1 import executor_service_pb2 as ex_pb
from starforge_api.executor.v1 import executor_service_pb2_grpc as ex_grpc
from starforge_api.job.v1 import job_state_pb2 as st

from common import errors
from common.channel import aio_channel, bearer
from common.rpc_status import from_rpc_error
from executor_svc import registry
from executor_svc.local.process_runtime import group_alive
from tests.integration.blob_server import BlobServer
from tests.integration.executors.launch_requests import WAIT_FOR_RELEASE, launch_request, shell_capsule

TOKEN = "executor-token-for-tests"
ROOT = pathlib.Path(__file__).resolve().parents[3]


@dataclass
class ExecutorProcess:
    proc: subprocess.Popen[bytes]
    address: str
    stderr: pathlib.Path
    ready_file: pathlib.Path

    def logs(self) -> str:
        return self.stderr.read_text(errors="replace")


def write_config(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "executor.yaml"
    doc = {
        "token": TOKEN,
        "local": {
            "state_dir": str(tmp_path / "state"),
            "runtime": "process",
            "inventory": [{"series": "cpu", "slots": 2}, {"series": "h200", "gpus": 8, "real_gpus": False}],
        },
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def executor_env() -> dict[str, str]:
    """The test's environment without STARFORGE_* settings, with the repo importable.

    PYTHONPATH: the venv's editable install may predate executor_svc (its finder maps packages
    that existed at `pip install -e` time); the console script itself is the one under test.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("STARFORGE_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def start_executor(config: pathlib.Path, run_dir: pathlib.Path, *args: str) -> ExecutorProcess:
    exe = shutil.which("starforge-executor") or str(pathlib.Path(sys.executable).parent / "starforge-executor")
    ready = run_dir / "ready.json"
    ready.unlink(missing_ok=True)  # a killed executor leaves its file behind; never read that one
    stderr = run_dir / f"executor-{time.monotonic_ns()}.log"
    env = executor_env()
    with stderr.open("wb") as err:
        proc = subprocess.Popen(
            [
                exe,
                "--kind",
                "local",
                "--config",
                str(config),
                "--listen",
                "127.0.0.1:0",
                "--ready-file",
                str(ready),
                *args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
        )
    deadline = time.monotonic() + 30
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_process(proc)
            pytest.fail(f"starforge-executor did not become ready (exit {proc.poll()}):\n{stderr.read_text()}")
        time.sleep(0.05)
    info = json.loads(ready.read_text())
    if info["pid"] != proc.pid:
        stop_process(proc)
        pytest.fail(f"the ready file names pid {info['pid']}, not the executor just started ({proc.pid})")
    return ExecutorProcess(proc, info["address"], stderr, ready)


def stop_process(proc: subprocess.Popen[bytes]) -> int:
    """SIGTERM our executor by PID, then SIGKILL if it does not stop."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


@pytest.fixture
def run_dir(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path


@pytest.fixture
def executor_process(run_dir: pathlib.Path) -> Iterator[ExecutorProcess]:
    ex = start_executor(write_config(run_dir), run_dir)
    try:
        yield ex
    finally:
        stop_process(ex.proc)


@pytest.fixture
async def stub(executor_process: ExecutorProcess) -> AsyncIterator[ex_grpc.ExecutorServiceStub]:
    async with aio_channel(executor_process.address) as channel:
        yield ex_grpc.ExecutorServiceStub(channel)


AUTH = bearer(TOKEN)


async def observe(stub: ex_grpc.ExecutorServiceStub, attempt_id: str) -> ex_pb.Observation:
    resp = await stub.Observe(ex_pb.ObserveRequest(attempt_ids=[attempt_id]), metadata=AUTH, timeout=10)
    observation: ex_pb.Observation = resp.observations[0]
    return observation


async def wait_state(stub: ex_grpc.ExecutorServiceStub, attempt_id: str, *states: int) -> ex_pb.Observation:
    deadline = time.monotonic() + 30
    while True:
        obs = await observe(stub, attempt_id)
        if obs.state in states:
            return obs
        assert time.monotonic() < deadline, f"{attempt_id} never reached {states}: {obs}"
        await asyncio.sleep(0.05)


async def test_health_auth_and_capabilities(
    executor_process: ExecutorProcess, stub: ex_grpc.ExecutorServiceStub
) -> None:
    async with aio_channel(executor_process.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for name in ("", "starforge.executor.v1.ExecutorService"):
            resp = await health.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
            assert resp.status == health_pb2.HealthCheckResponse.SERVING

    for metadata in (None, bearer("wrong-token")):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.DescribeCapabilities(ex_pb.DescribeCapabilitiesRequest(), metadata=metadata, timeout=5)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED

    caps = await stub.DescribeCapabilities(ex_pb.DescribeCapabilitiesRequest(), metadata=AUTH, timeout=5)
    assert (caps.kind, caps.runtime) == ("local", "process")
    assert set(caps.capabilities) == {
        ex_pb.EXECUTOR_CAPABILITY_GPUS,
        ex_pb.EXECUTOR_CAPABILITY_PAUSE,
        ex_pb.EXECUTOR_CAPABILITY_ARTIFACTS,
    }
    inv = {i.series: (i.nodes, i.gpus_per_node, i.free_gpus) for i in caps.inventory}
    assert inv == {"cpu": (1, 0, 0), "h200": (1, 8, 8)}

    lines = [json.loads(line) for line in executor_process.logs().splitlines() if line.strip()]
    assert any("serving on" in line["msg"] for line in lines)  # structured logs on stderr


async def test_lifecycle_over_grpc(blobs: BlobServer, stub: ex_grpc.ExecutorServiceStub) -> None:
    req = launch_request(
        blobs, shell_capsule("echo started\n" + WAIT_FOR_RELEASE + "echo finished\n"), series="h200", gpus=2
    )
    first = await stub.Launch(req, metadata=AUTH, timeout=30)
    assert not first.already_launched
    assert first.backend_handle
    second = await stub.Launch(req, metadata=AUTH, timeout=30)
    assert second.already_launched
    assert second.backend_handle == first.backend_handle
    await wait_state(stub, req.attempt_id, st.JOB_STATE_RUNNING)

    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Cleanup(ex_pb.CleanupRequest(attempt_id=req.attempt_id), metadata=AUTH, timeout=10)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION

    (pathlib.Path(first.out_dir) / "release").touch()
    obs = await wait_state(stub, req.attempt_id, st.JOB_STATE_SUCCEEDED)
    assert obs.exit_code == 0
    assert list(obs.log_tail) == ["started", "finished"]
    assert obs.HasField("end_time")
    removed = await stub.Cleanup(ex_pb.CleanupRequest(attempt_id=req.attempt_id), metadata=AUTH, timeout=10)
    assert removed.removed == 4  # capsule, datasets, workspace, scratch

    sleeper = launch_request(blobs, shell_capsule("sleep 600\n"))
    await stub.Launch(sleeper, metadata=AUTH, timeout=30)
    await wait_state(stub, sleeper.attempt_id, st.JOB_STATE_RUNNING)
    stopped = await stub.Stop(
        ex_pb.StopRequest(attempt_id=sleeper.attempt_id, grace_seconds=2), metadata=AUTH, timeout=10
    )
    assert stopped.stopped
    await wait_state(stub, sleeper.attempt_id, st.JOB_STATE_STOPPED)
    again = await stub.Stop(ex_pb.StopRequest(attempt_id=sleeper.attempt_id), metadata=AUTH, timeout=10)
    assert not again.stopped

    listed = await stub.ListAttempts(ex_pb.ListAttemptsRequest(), metadata=AUTH, timeout=10)
    assert {o.attempt_id for o in listed.observations} == {req.attempt_id, sleeper.attempt_id}
    missing = await observe(stub, "jnonexistent00.1")
    assert missing.not_found


async def test_refusals_carry_rich_details(blobs: BlobServer, stub: ex_grpc.ExecutorServiceStub) -> None:
    too_big = launch_request(blobs, shell_capsule("true\n"), series="h200", gpus=16)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Launch(too_big, metadata=AUTH, timeout=10)
    refused = from_rpc_error(err.value)
    assert isinstance(refused, errors.InvalidArgument)
    assert refused.field_violations[0].field == "pools[0].gpus_per_node"

    reqs = [launch_request(blobs, shell_capsule(WAIT_FOR_RELEASE)) for _ in range(3)]
    for r in reqs[:2]:
        await stub.Launch(r, metadata=AUTH, timeout=30)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Launch(reqs[2], metadata=AUTH, timeout=30)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    for r in reqs[:2]:
        await stub.Stop(ex_pb.StopRequest(attempt_id=r.attempt_id, grace_seconds=1), metadata=AUTH, timeout=10)


async def test_sigterm_stops_the_executor_but_not_its_jobs(blobs: BlobServer, run_dir: pathlib.Path) -> None:
    config = write_config(run_dir)
    started: list[ExecutorProcess] = []
    pid = 0
    try:
        started.append(ex := start_executor(config, run_dir))
        req = launch_request(blobs, shell_capsule(WAIT_FOR_RELEASE + "echo done\n"))
        async with aio_channel(ex.address) as channel:
            stub = ex_grpc.ExecutorServiceStub(channel)
            launched = await stub.Launch(req, metadata=AUTH, timeout=30)
            await wait_state(stub, req.attempt_id, st.JOB_STATE_RUNNING)
        pid = int(launched.backend_handle)

        assert stop_process(ex.proc) == 0, ex.logs()
        assert not ex.ready_file.exists()
        assert group_alive(pid), "stopping the executor must not stop its jobs"

        started.append(restarted := start_executor(config, run_dir))
        async with aio_channel(restarted.address) as channel:
            stub = ex_grpc.ExecutorServiceStub(channel)
            assert (await observe(stub, req.attempt_id)).state == st.JOB_STATE_RUNNING
        restarted.proc.kill()  # even a killed executor leaves its jobs running
        restarted.proc.wait()
        assert group_alive(pid)

        started.append(third := start_executor(config, run_dir))
        async with aio_channel(third.address) as channel:
            stub = ex_grpc.ExecutorServiceStub(channel)
            assert (await observe(stub, req.attempt_id)).state == st.JOB_STATE_RUNNING
            (pathlib.Path(launched.out_dir) / "release").touch()
            obs = await wait_state(stub, req.attempt_id, st.JOB_STATE_SUCCEEDED)
            assert list(obs.log_tail) == ["done"]
    finally:
        for p in started:
            stop_process(p.proc)
        if pid and group_alive(pid):  # the job this test started, by its process group
            os.killpg(pid, signal.SIGKILL)


def test_unknown_kind_and_bad_config_are_clear_errors(run_dir: pathlib.Path) -> None:
    exe = shutil.which("starforge-executor") or "starforge-executor"
    proc = subprocess.run([exe, "--kind", "kubernetes"], capture_output=True, text=True, timeout=60, env=executor_env())
    assert proc.returncode == 2
    assert f"unknown executor kind 'kubernetes'; valid kinds: {', '.join(registry.valid_kinds())}" in proc.stderr

    bad = run_dir / "bad.yaml"
    bad.write_text(yaml.safe_dump({"local": {"runtime": "podman"}}))
    proc = subprocess.run(
        [exe, "--kind", "local", "--config", str(bad)], capture_output=True, text=True, timeout=60, env=executor_env()
    )
    assert proc.returncode == 2
    assert "'podman' is not one of process, docker" in proc.stderr

    typo = run_dir / "typo.yaml"
    typo.write_text(yaml.safe_dump({"local": {"runtme": "process"}}))
    proc = subprocess.run(
        [exe, "--kind", "local", "--config", str(typo)], capture_output=True, text=True, timeout=60, env=executor_env()
    )
    assert proc.returncode == 2
    assert "did you mean runtime" in proc.stderr
