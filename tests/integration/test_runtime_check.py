"""The runner checks the runtime's Python version and declared capabilities before the method runs:
a mismatch fails with a diagnosis and a hint (shown by `sf job status`), not a stack trace."""

from __future__ import annotations

import json
import pathlib
import sys

from starforge_api.job.v1 import job_state_pb2 as st

from control.config import InventoryConfig
from tests.integration.console import console

GPU = {"inventory": [{"series": "h100", "gpus": 1, "slots": 1}]}


async def test_an_interpreter_older_than_the_runtime_declares_is_diagnosed(tmp_path: pathlib.Path) -> None:
    assert sys.version_info[:2] < (3, 12), "nemo-rl's runtime declares Python 3.12; this host must be older"
    inventory = [InventoryConfig(series="h100", nodes=1, gpus_per_node=1)]
    async with console(tmp_path, local=GPU, inventory=inventory, hf_precheck=False) as c:
        lab = await c.lab("sft", method="nemo-rl/sft")
        r = await c.sf_async(
            "-o", "json", "submit", "sft", "--profile", "h100:1", "--image", "host", "--allow-dirty", cwd=lab
        )
        job_id = json.loads(r.stdout)["job"]["job_id"]
        done = await c.wait(job_id, st.JOB_STATE_FAILED, st.JOB_STATE_SUCCEEDED, timeout=90)
        assert done.state == st.JOB_STATE_FAILED
        d = done.diagnosis
        have = ".".join(str(v) for v in sys.version_info[:3])
        assert d.failure_class == st.FAILURE_CLASS_PRECHECK
        assert d.summary == (
            f"this image runs Python {have}, but runtime nemo-rl-0.5.0 of nemo-rl/sft needs Python 3.12 or newer"
        )
        assert d.hint.startswith("Run nemo-rl/sft in its runtime's image or in an image with Python 3.12+ (--image)")
        assert not any("Traceback" in ln for ln in await c.logs(job_id))
        status = json.loads((await c.sf_async("-o", "json", "job", "status", job_id)).stdout)
        diagnosis = status.get("job", status)["diagnosis"]
        assert diagnosis["summary"] == d.summary and diagnosis["hint"] == d.hint
        text = (await c.sf_async("job", "status", job_id)).stdout
        assert "Python 3.12" in text and "Traceback" not in text


async def test_a_capability_the_image_does_not_declare_is_diagnosed(tmp_path: pathlib.Path) -> None:
    # An image declares what it can do (ENV STARFORGE_IMAGE_CAPABILITIES=...); this job's
    # environment stands in for such an image: it declares only "vllm", and the job runs on the
    # CPU profile, which needs "cpu".
    async with console(tmp_path, hf_precheck=False) as c:
        lab = await c.lab("exp", train_sh="#!/usr/bin/env bash\necho should never run\n")
        r = await c.sf_async("-o", "json", "submit", "exp", "--env", "STARFORGE_IMAGE_CAPABILITIES=vllm", cwd=lab)
        job_id = json.loads(r.stdout)["job"]["job_id"]
        done = await c.wait(job_id, st.JOB_STATE_FAILED, st.JOB_STATE_SUCCEEDED, timeout=90)
        assert done.state == st.JOB_STATE_FAILED
        d = done.diagnosis
        assert d.failure_class == st.FAILURE_CLASS_PRECHECK
        assert d.summary == (
            "custom/custom needs capabilities that the image (STARFORGE_IMAGE_CAPABILITIES) does not declare: "
            "cpu (it runs on CPU-only machines (a cpu profile)); declared: vllm"
        )
        assert "sf recipe show custom/custom" in d.hint
        logs = await c.logs(job_id)
        assert not any("should never run" in ln or "Traceback" in ln for ln in logs)
        text = (await c.sf_async("job", "status", job_id)).stdout
        assert "does not declare" in text and "Traceback" not in text
