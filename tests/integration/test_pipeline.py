"""`sf submit exp --then export --then eval`: stages run as jobs of their own after training succeeds,
read the training job's FORGE_OUT_DIR, and are skipped (STOPPED, with the reason) when it fails."""

from __future__ import annotations

import json
import pathlib

import pytest
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.job.v1 import job_pb2
from starforge_api.job.v1 import job_state_pb2 as st

from tests.integration.console import console

# Console-level: each test runs with its ledger on SQLite and on PostgreSQL.
pytestmark = pytest.mark.usefixtures("ledger")

TRAIN = '#!/usr/bin/env bash\nset -e\nmkdir -p "$FORGE_OUT_DIR/checkpoints"\necho weights > "$FORGE_OUT_DIR/checkpoints/final.txt"\necho trained\n'
EXPORT = '#!/usr/bin/env bash\nset -e\ncat "$FORGE_OUT_DIR/checkpoints/final.txt"\ncp "$FORGE_OUT_DIR/checkpoints/final.txt" "$FORGE_OUT_DIR/exported.txt"\necho exported\n'
EVAL = '#!/usr/bin/env bash\nset -e\ntest -f "$FORGE_OUT_DIR/exported.txt"\necho "eval ok"\n'


async def _pipeline(c, lab: pathlib.Path) -> list[job_pb2.Job]:  # type: ignore[no-untyped-def]
    r = await c.sf_async("-o", "json", "submit", "exp", "--then", "export", "--then", "eval", cwd=lab)
    out = json.loads(r.stdout)
    root = (out.get("job") or out)["job_id"]
    listed = await c.jobs.ListJobs(ctl.ListJobsRequest(page_size=100), metadata=c.md)
    chain = [j for j in listed.jobs if j.job_id == root]
    while True:
        nxt = [j for j in listed.jobs if j.parent_job_id == chain[-1].job_id]
        if not nxt:
            return chain
        chain += nxt


async def test_stages_run_after_training_and_read_its_checkpoint(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path) as c:
        lab = await c.lab(
            "exp",
            TRAIN,
            files={"experiments/exp/export.sh": EXPORT, "experiments/exp/eval.sh": EVAL},
        )
        train, export, evaluation = await _pipeline(c, lab)
        assert [j.stage for j in (train, export, evaluation)] == ["", "export", "eval"]
        assert export.state == st.JOB_STATE_QUEUED
        assert export.wait.reason == st.WAIT_REASON_DEPENDENCY
        assert export.wait.message == f"waiting for training job {train.job_id} to succeed"
        for j in (train, export, evaluation):
            done = await c.wait(j.job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, st.JOB_STATE_STOPPED, timeout=90)
            assert done.state == st.JOB_STATE_SUCCEEDED, (done.stage, done.diagnosis, await c.logs(j.job_id))
        assert "weights" in await c.logs(export.job_id)
        assert "eval ok" in await c.logs(evaluation.job_id)


async def test_stages_are_skipped_when_training_fails(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path) as c:
        lab = await c.lab(
            "exp",
            "#!/usr/bin/env bash\nexit 3\n",
            files={"experiments/exp/export.sh": EXPORT, "experiments/exp/eval.sh": EVAL},
        )
        train, export, evaluation = await _pipeline(c, lab)
        await c.wait(train.job_id, st.JOB_STATE_FAILED, timeout=60)
        skipped = await c.wait(export.job_id, st.JOB_STATE_STOPPED, timeout=30)
        assert skipped.attempts == []
        e = await c.wait(evaluation.job_id, st.JOB_STATE_STOPPED, timeout=30)
        events = [x async for x in c.jobs.WatchJob(ctl.WatchJobRequest(job_id=e.job_id), metadata=c.md)]
        assert events[-1].event.reason == f"not run: the export job {export.job_id} ended STOPPED"


async def test_a_stage_script_must_exist(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path) as c:
        lab = await c.lab("exp", TRAIN, files={"experiments/exp/export.sh": EXPORT})
        r = await c.sf_async("submit", "exp", "--then", "export", "--then", "eval", cwd=lab, check=False)
        assert r.returncode == 3
        assert "experiments/exp/eval.sh not found in the package: the eval stage runs it" in r.stderr
