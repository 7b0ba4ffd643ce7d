"""`starforge-executor --kind kuberay` as a real process, called over gRPC like the control plane does."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import grpc
import pytest
import yaml
from starforge_api.executor.v1 import executor_service_pb2 as ex_pb
from starforge_api.executor.v1 import executor_service_pb2_grpc as ex_grpc
from starforge_api.job.v1 import job_state_pb2 as st

from common.channel import aio_channel, bearer
from executor_svc.kuberay import names
from tests.integration.backends.kube import Kube
from tests.unit.kuberay.requests import pool, request

from .conftest import Operator

pytestmark = pytest.mark.kube

TOKEN = "kuberay-executor-token"
ROOT = pathlib.Path(__file__).resolve().parents[3]


@pytest.fixture
def executor_address(kube: Kube, namespace: str, tmp_path: pathlib.Path) -> Iterator[str]:
    config = tmp_path / "executor.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "token": TOKEN,
                "kuberay": {
                    "kubeconfig": str(kube.kubeconfig),
                    "namespace": namespace,
                    "inventory": [{"series": "h200", "nodes": 2, "gpus_per_node": 8, "cpu": "96", "memory": "1600Gi"}],
                },
            }
        )
    )
    ready = tmp_path / "ready.json"
    log = tmp_path / "executor.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("STARFORGE_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    exe = shutil.which("starforge-executor") or str(pathlib.Path(sys.executable).parent / "starforge-executor")
    cmd = [exe, "--kind", "kuberay", "--config", str(config), "--listen", "127.0.0.1:0", "--ready-file", str(ready)]
    with log.open("wb") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"starforge-executor --kind kuberay did not start (exit {proc.poll()}):\n{log.read_text()}")
            time.sleep(0.05)
        info = json.loads(ready.read_text())
        assert info["pid"] == proc.pid
        yield info["address"]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, log.read_text()


async def test_describe_launch_observe_over_grpc(executor_address: str, operator: Operator) -> None:
    req = request([pool("h200", 8, nodes=2)])
    async with aio_channel(executor_address) as channel:
        stub = ex_grpc.ExecutorServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.DescribeCapabilities(ex_pb.DescribeCapabilitiesRequest(), timeout=10)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        md = bearer(TOKEN)
        caps = await stub.DescribeCapabilities(ex_pb.DescribeCapabilitiesRequest(), metadata=md, timeout=10)
        assert caps.kind == "kuberay"
        assert caps.runtime == "ray"
        assert ex_pb.EXECUTOR_CAPABILITY_MULTI_POOL in caps.capabilities
        assert ex_pb.EXECUTOR_CAPABILITY_PAUSE not in caps.capabilities  # no out_volume_claim
        # No artifacts: the out dir is on a volume only pods mount; refused, never an empty list.
        assert ex_pb.EXECUTOR_CAPABILITY_ARTIFACTS not in caps.capabilities
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.ListArtifacts(
                ex_pb.ListArtifactsRequest(attempt_id=req.attempt_id, out_key=req.job_id), metadata=md, timeout=10
            )
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        with pytest.raises(grpc.aio.AioRpcError) as info:
            async for _ in stub.ReadArtifact(
                ex_pb.ReadArtifactRequest(path="x", attempt_id=req.attempt_id, out_key=req.job_id),
                metadata=md,
                timeout=10,
            ):
                pass
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert [(i.series, i.nodes, i.gpus_per_node, i.free_gpus) for i in caps.inventory] == [("h200", 2, 8, 16)]

        launched = await stub.Launch(req, metadata=md, timeout=10)
        assert launched.backend_handle.endswith("/" + names.rayjob_name(req.attempt_id))
        assert not launched.already_launched
        assert (await stub.Launch(req, metadata=md, timeout=10)).already_launched

        name = names.rayjob_name(req.attempt_id)
        operator.status(name, jobDeploymentStatus="Running", jobStatus="RUNNING", startTime="2026-11-29T10:00:00Z")
        deadline = time.monotonic() + 3
        while True:
            found = await stub.Observe(
                ex_pb.ObserveRequest(attempt_ids=[req.attempt_id, "j0000000000000.1"]), metadata=md, timeout=10
            )
            obs, missing = found.observations
            if obs.state == st.JOB_STATE_RUNNING or time.monotonic() > deadline:
                break
        assert obs.state == st.JOB_STATE_RUNNING
        assert obs.start_time.ToJsonString() == "2026-11-29T10:00:00Z"
        assert missing.not_found

        bad = request([pool("a100", 8)])
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Launch(bad, metadata=md, timeout=10)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "series 'a100' is not in this kuberay executor's inventory (h200)" in (info.value.details() or "")


def test_a_bad_kubeconfig_stops_the_process_with_the_reason(tmp_path: pathlib.Path) -> None:
    config = tmp_path / "executor.yaml"
    config.write_text(yaml.safe_dump({"token": TOKEN, "kuberay": {"kubeconfig": str(tmp_path / "missing")}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("STARFORGE_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    exe = shutil.which("starforge-executor") or str(pathlib.Path(sys.executable).parent / "starforge-executor")
    proc = subprocess.run(
        [exe, "--kind", "kuberay", "--config", str(config), "--listen", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    assert f"kuberay.kubeconfig {tmp_path / 'missing'} does not exist" in proc.stderr
