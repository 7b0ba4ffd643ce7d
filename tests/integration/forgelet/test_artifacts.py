"""Artifacts on the agent kind: the job runs in a container on a forgelet node; `sf job artifacts`
and `sf job download` reach its FORGE_OUT_DIR on that node through the console, the agent
executor and the node's forgelet (all real processes, docker runtime)."""

from __future__ import annotations

import pathlib

import grpc
import pytest
from starforge_api.forgelet.v1 import forgelet_service_pb2 as fl_pb
from starforge_api.forgelet.v1 import forgelet_service_pb2_grpc as fl_grpc
from starforge_api.job.v1 import job_state_pb2 as st

from common.channel import aio_channel, bearer
from tests.integration.artifacts_support import FILES, WRITE_ARTIFACTS, check_download, check_listing
from tests.integration.backends.docker import TEST_IMAGE, DockerEngine
from tests.integration.forgelet.fleet import ForgeletProcess, agent_console
from tests.integration.forgelet.test_e2e import submit, wait_state
from tests.security.identity_support import new_user, refused

pytestmark = [pytest.mark.docker, pytest.mark.slow]


async def test_agent_artifacts_list_download_resume(
    tmp_path: pathlib.Path, dockerd: DockerEngine, python_image: str
) -> None:
    async with agent_console(tmp_path, dockerd) as (c, fleet):
        lab = await c.lab("arts", WRITE_ARTIFACTS, config={"image": TEST_IMAGE})
        job_id = await submit(c, lab, "arts", profile="h200:1")
        job = await wait_state(c, job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=180)
        assert job.state == st.JOB_STATE_SUCCEEDED, await c.logs(job_id)
        node = job.attempts[-1].node
        out_dir = fleet[node].state_dir / "out" / job_id
        assert (out_dir / "eval" / "results.json").exists()
        await check_listing(c.sf_async, job_id, out_dir)
        await check_download(c.sf_async, job_id, out_dir, tmp_path / "dl")

        # The node's forgelet wants the executor token: a user's token is refused there too.
        user = await new_user(c, "mallory")
        for call in (
            fleet[node].call("ListArtifacts", fl_pb.ListArtifactsRequest(out_key=job_id), token=user),
            _drain(fleet[node], fl_pb.ReadArtifactRequest(out_key=job_id, path=FILES[1]), user),
        ):
            await refused(call, grpc.StatusCode.UNAUTHENTICATED)


async def _drain(f: ForgeletProcess, request: fl_pb.ReadArtifactRequest, token: str) -> None:
    async with aio_channel(f.address) as ch:
        async for _ in fl_grpc.ForgeletServiceStub(ch).ReadArtifact(request, metadata=bearer(token), timeout=30):
            pass
