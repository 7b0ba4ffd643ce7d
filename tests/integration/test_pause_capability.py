"""PauseJob refuses a job whose fleet cannot pause (FAILED_PRECONDITION, one clear message), and
leaves the job as it was. A KubeRay fleet without `out_volume_claim` keeps FORGE_OUT_DIR in an
emptyDir that dies with the pods, so its executor does not declare PAUSE. (A fleet that can pause:
tests/integration/test_pause_resume.py.)"""

from __future__ import annotations

import pathlib

import grpc
import pytest
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.executor.v1 import executor_service_pb2 as ex_pb
from starforge_api.job.v1 import job_state_pb2 as st

from common.rpc_status import from_rpc_error
from control.config import InventoryConfig
from tests.integration.backends.kube import Kube
from tests.integration.console import console
from tests.integration.test_e2e_kinds import _submit


@pytest.mark.kube
async def test_pause_on_a_fleet_that_cannot_pause_is_refused(tmp_path: pathlib.Path, kube: Kube) -> None:
    async with console(
        tmp_path,
        kind="kuberay",
        local={
            "kubeconfig": str(kube.kubeconfig),
            "namespace": "pause-capability",
            "inventory": [{"series": "h100", "nodes": 1, "gpus_per_node": 8}],
        },
        inventory=[InventoryConfig("h100", 1, 8)],
        image_allowlist=["registry.local/"],
        http_listen="127.0.0.1:0",  # kuberay pods fetch the capsule over HTTP
    ) as c:
        status = c.app.ctx.executors.status["kuberay"]
        assert status.ever_reachable
        assert ex_pb.EXECUTOR_CAPABILITY_PAUSE not in status.capabilities
        lab = await c.lab("exp", config={"image": "registry.local/train:v1"})
        job_id = await _submit(c, lab, "exp", "--profile", "h100:8")
        await c.wait(job_id, st.JOB_STATE_PENDING, timeout=60)

        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await c.jobs.PauseJob(ctl.PauseJobRequest(job_id=job_id), metadata=c.md)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        err = from_rpc_error(refused.value)
        assert "cannot pause" in err.message and "kuberay" in err.message, err.message
        assert [v.subject for v in err.precondition_violations] == ["kuberay"]
        job = await c.get(job_id)
        assert job.state == st.JOB_STATE_PENDING  # nothing was requested of it

        r = await c.sf_async("job", "pause", job_id, check=False)
        assert r.returncode != 0 and "cannot pause" in r.stderr, (r.returncode, r.stderr)
        assert (await c.get(job_id)).state == st.JOB_STATE_PENDING
