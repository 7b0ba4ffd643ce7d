"""External observability through `sf`: the URL reaches the job (and its tool's variable), is
recorded in capsule.json and the job, and `sf job status` shows it."""

from __future__ import annotations

import json
import pathlib

from starforge_api.job.v1 import job_state_pb2 as st

from tests.integration.console import Console, console

PRINT_ENV = """#!/usr/bin/env bash
python3 - <<'PY'
import json, os
keys = ("STARFORGE_OBSERVABILITY_URL", "STARFORGE_OBSERVABILITY_TOOL", "WANDB_BASE_URL", "MLFLOW_TRACKING_URI")
print("ENV " + json.dumps({k: os.environ[k] for k in keys if k in os.environ}, sort_keys=True), flush=True)
print("SDK_ON_PATH " + str("/sdk" in os.environ.get("PYTHONPATH", "")), flush=True)
PY
"""


async def _submit(c: Console, lab: pathlib.Path, *args: str) -> tuple[str, dict[str, str], dict]:  # type: ignore[type-arg]
    r = await c.sf_async("-o", "json", "submit", "exp", *args, cwd=lab)
    job_id = json.loads(r.stdout)["job"]["job_id"]
    done = await c.wait(job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=90)
    assert done.state == st.JOB_STATE_SUCCEEDED, done.diagnosis
    lines = await c.logs(job_id)
    env = json.loads(next(ln for ln in lines if ln.startswith("ENV "))[4:])
    assert "SDK_ON_PATH False" in lines, "external mode does not inject the SDK"
    capsule = json.loads(c.app.ctx.store.read_bytes(done.attempts[0].capsule_digest))
    return job_id, env, capsule


async def test_observability_url_reaches_the_job_capsule_and_status(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path) as c:
        lab = await c.lab("exp", PRINT_ENV, config={"observability": "external"})
        url = "https://wandb.example.internal:8443"
        job_id, env, capsule = await _submit(c, lab, "--observability-url", url)
        assert env == {
            "STARFORGE_OBSERVABILITY_URL": url,
            "STARFORGE_OBSERVABILITY_TOOL": "wandb",
            "WANDB_BASE_URL": url,
        }
        assert capsule["run"]["observability"] == "external"
        assert capsule["run"]["observability_url"] == url
        assert capsule["run"]["observability_tool"] == "wandb"
        job = json.loads((await c.sf_async("-o", "json", "job", "status", job_id)).stdout)
        job = job.get("job", job)
        assert job["spec"]["observability"] == {"mode": "OBSERVABILITY_MODE_EXTERNAL", "url": url, "tool": "wandb"}
        text = (await c.sf_async("job", "status", job_id)).stdout
        assert "tracker" in text and "wandb.example.internal" in text

        # A URL that does not say its tool: --observability-tool names it.
        plain = "http://tracking.example.internal:5000"
        _, env, capsule = await _submit(c, lab, "--observability-url", plain, "--observability-tool", "mlflow")
        assert env == {
            "STARFORGE_OBSERVABILITY_URL": plain,
            "STARFORGE_OBSERVABILITY_TOOL": "mlflow",
            "MLFLOW_TRACKING_URI": plain,
        }
        assert capsule["run"]["observability_tool"] == "mlflow"
        # ... and without it, only STARFORGE_OBSERVABILITY_URL.
        _, env, _ = await _submit(c, lab, "--observability-url", plain)
        assert env == {"STARFORGE_OBSERVABILITY_URL": plain, "STARFORGE_OBSERVABILITY_TOOL": ""}


async def test_bad_observability_input_is_refused_with_one_message(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path) as c:
        lab = await c.lab("exp", PRINT_ENV, config={"observability": "external"})
        cases = [
            (("--observability-url", "ftp://wandb.example"), 3, "must be an http:// or https:// URL with a host"),
            (
                ("--observability-url", "http://x.example", "--observability-tool", "comet"),
                3,
                "unknown observability tool 'comet'; known: mlflow, wandb",
            ),
            (("--observability-tool", "wandb"), 2, "--observability-tool names the tracker of --observability-url URL"),
        ]
        for args, code, text in cases:
            r = await c.sf_async("submit", "exp", *args, cwd=lab, check=False)
            assert r.returncode == code, (args, r.stdout, r.stderr)
            assert text in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
        jobs = json.loads((await c.sf_async("-o", "json", "job", "ls")).stdout)
        assert (jobs.get("jobs") if isinstance(jobs, dict) else jobs) in ([], None)
