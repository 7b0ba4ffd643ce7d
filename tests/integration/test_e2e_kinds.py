"""Through `sf` for the local kind on Docker and for KubeRay: a job seen through RUNNING to
SUCCEEDED, and a job stopped while it runs. (Slurm and agent: tests/integration/slurm/test_e2e.py
and tests/integration/forgelet/test_e2e.py.)"""

from __future__ import annotations

import asyncio
import json
import pathlib
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from starforge_api.job.v1 import job_state_pb2 as st

from control.config import InventoryConfig
from executor_svc.kuberay.names import rayjob_name
from tests.integration.backends.docker import DockerEngine
from tests.integration.backends.kube import Kube
from tests.integration.console import Console, console

LONG = "#!/usr/bin/env bash\necho started\nsleep 300\n"


async def _submit(c: Console, lab: pathlib.Path, *args: str) -> str:
    r = await c.sf_async("-o", "json", "submit", *args, cwd=lab)
    return str(json.loads(r.stdout)["job"]["job_id"])


@pytest.mark.docker
async def test_local_docker_through_sf(tmp_path: pathlib.Path, dockerd: DockerEngine, python_image: str) -> None:
    async with console(
        tmp_path,
        runtime="docker",
        local={"docker": {"base_url": dockerd.base_url}},
        image_allowlist=[python_image.split(":", maxsplit=1)[0]],
    ) as c:
        ok = await c.lab(
            "ok",
            "#!/usr/bin/env bash\npython3 -c 'import sys; print(\"in\", sys.version.split()[0])'\n",
            config={"image": python_image},
        )
        job_id = await _submit(c, ok, "ok", "--profile", "cpu")
        await c.wait(job_id, st.JOB_STATE_RUNNING, st.JOB_STATE_SUCCEEDED, timeout=60)
        done = await c.wait(job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=90)
        assert done.state == st.JOB_STATE_SUCCEEDED, done.diagnosis
        assert any(line.startswith("in 3.") for line in await c.logs(job_id))

        long = await c.lab("long", LONG, config={"image": python_image})
        job_id = await _submit(c, long, "long")
        running = await c.wait(job_id, st.JOB_STATE_RUNNING, timeout=90)
        handle = running.attempts[-1].backend_handle
        assert dockerd.client.containers.get(handle).status == "running"
        await c.sf_async("job", "stop", job_id)
        await c.wait(job_id, st.JOB_STATE_STOPPED, timeout=60)
        for _ in range(100):
            try:
                state = dockerd.client.containers.get(handle).status
            except Exception:
                break
            if state != "running":
                break
            await asyncio.sleep(0.2)
        else:
            raise AssertionError("the stopped job's container still runs")


@pytest.mark.kube
async def test_kuberay_through_sf(tmp_path: pathlib.Path, kube: Kube) -> None:
    namespace = "e2e-kinds"
    async with console(
        tmp_path,
        kind="kuberay",
        local={
            "kubeconfig": str(kube.kubeconfig),
            "namespace": namespace,
            "inventory": [{"series": "h100", "nodes": 2, "gpus_per_node": 8}],
        },
        inventory=[InventoryConfig("h100", 2, 8)],
        image_allowlist=["registry.local/"],
        http_listen="127.0.0.1:0",
    ) as c:
        api = client.CustomObjectsApi(kube.api)

        def operator(name: str, status: dict[str, Any]) -> None:
            """The test plays the KubeRay operator: it writes the RayJob's status."""
            api.patch_namespaced_custom_object_status("ray.io", "v1", namespace, "rayjobs", name, {"status": status})

        lab = await c.lab("exp", config={"image": "registry.local/train:v1"})
        job_id = await _submit(c, lab, "exp", "--profile", "h100:8")
        pending = await c.wait(job_id, st.JOB_STATE_PENDING, timeout=60)
        name = rayjob_name(pending.attempts[-1].attempt_id)
        rayjob = cast(dict[str, Any], api.get_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs", name))
        assert rayjob["spec"]["entrypoint"]
        head = {"rayClusterStatus": {"head": {"podName": f"{name}-head-x7k2p"}}}
        await asyncio.to_thread(operator, name, {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"} | head)
        await c.wait(job_id, st.JOB_STATE_RUNNING, timeout=30)
        await asyncio.to_thread(operator, name, {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"})
        done = await c.wait(job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=30)
        assert done.state == st.JOB_STATE_SUCCEEDED
        # The executor asked for the head pod's imageID; this API server has no Pods, so the
        # provenance says why the digest is unresolved instead of staying empty.
        digest = done.provenance.image_digest
        assert digest.startswith(f"unresolved:read Pod {namespace}/{name}-head-x7k2p: "), digest
        assert "serves no core/v1 Pods" in digest

        job_id = await _submit(c, lab, "exp", "--profile", "h100:8")
        pending = await c.wait(job_id, st.JOB_STATE_PENDING, timeout=60)
        name = rayjob_name(pending.attempts[-1].attempt_id)
        await asyncio.to_thread(operator, name, {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"})
        await c.wait(job_id, st.JOB_STATE_RUNNING, timeout=30)
        await c.sf_async("job", "stop", job_id)
        stopped = await c.wait(job_id, st.JOB_STATE_STOPPED, timeout=60)
        assert stopped.attempts[-1].state == st.JOB_STATE_STOPPED
        try:
            obj = cast(
                dict[str, Any] | None, api.get_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs", name)
            )
        except ApiException as e:
            obj, status = None, e.status
        else:
            status = 200
        # deleted (Foreground: gone, or still terminating with a deletionTimestamp)
        assert status == 404 or (obj is not None and obj["metadata"].get("deletionTimestamp"))
