"""Whole command flows against a fake console client (no sockets): new, submit, logs."""

from __future__ import annotations

import json
import os
import pathlib
import uuid
from typing import Any

import pytest
from starforge_api.catalog.v1 import catalog_service_pb2 as cat
from starforge_api.catalog.v1 import recipe_pb2
from starforge_api.control.v1 import blob_service_pb2 as bs
from starforge_api.control.v1 import control_service_pb2 as cs
from starforge_api.control.v1 import fleet_service_pb2 as fs
from starforge_api.job.v1 import job_pb2, job_spec_pb2, job_state_pb2, telemetry_pb2
from typer.testing import CliRunner

from cli.context import AppState
from cli.main import app
from common import errors
from control.config import DEFAULT_PROFILES
from tests.unit.cli.fakes import FakeClient, FakeRpcError, FakeStream
from tests.unit.cli.helpers import git

runner = CliRunner()


class Console:
    """Just enough of a console for the CLI's flows."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.submitted: list[cs.SubmitJobRequest] = []

    def handlers(self) -> dict[str, Any]:
        return {
            "ResolveLock": lambda r: cat.ResolveLockResponse(
                lock=job_spec_pb2.RecipeLock(
                    method=r.method,
                    version="1.0.0",
                    digest="c" * 64,
                    framework_version=r.framework_version or "1",
                    runtime_id="rt",
                )
            ),
            "GetRecipe": lambda r: cat.GetRecipeResponse(
                recipe=recipe_pb2.Recipe(
                    name=r.name,
                    version="1.0.0",
                    # custom/custom declares no parameters (its config.yaml is the schema), like the real one
                    parameters=[]
                    if r.name == "custom/custom"
                    else [
                        recipe_pb2.Parameter(key="sft.lr", type=recipe_pb2.PARAMETER_TYPE_FLOAT, default_json="0.001")
                    ],
                )
            ),
            "ListProfiles": lambda r: fs.ListProfilesResponse(
                profiles=[
                    fs.HardwareProfile(
                        series=p.series,
                        gpus_per_node=p.gpus_per_node,
                        default_gpus=p.default_gpus,
                        max_nodes=p.max_nodes,
                    )
                    for p in DEFAULT_PROFILES
                ]
            ),
            "FindMissingBlobs": lambda r: bs.FindMissingBlobsResponse(
                missing_digests=[d for d in r.digests if d not in self.blobs]
            ),
            "UploadBlobs": self.upload,
            "SubmitJob": self.submit,
            "GetJob": lambda r: cs.GetJobResponse(job=job_pb2.Job(job_id="j1", state=job_state_pb2.JOB_STATE_RUNNING)),
            "StreamJobLogs": lambda r: FakeStream(
                [
                    cs.StreamJobLogsResponse(lines=[telemetry_pb2.LogLine(attempt_number=1, offset=0, text="hello")]),
                    cs.StreamJobLogsResponse(final_state=job_state_pb2.JOB_STATE_FAILED),
                ]
            ),
        }

    def upload(self, requests: Any) -> bs.UploadBlobsResponse:
        buf = b""
        for r in requests:
            for whole in r.blobs:
                self.blobs[whole.digest] = whole.data
            buf += r.data
            if r.finish:
                self.blobs[r.digest] = buf
                buf = b""
        return bs.UploadBlobsResponse()

    def submit(self, req: cs.SubmitJobRequest) -> cs.SubmitJobResponse:
        if any(o.key == "bad" for o in req.spec.overrides):
            raise FakeRpcError.from_error(
                errors.InvalidArgument(
                    "1 override is wrong", field_violations=(errors.FieldViolation("overrides[0].key", "unknown: bad"),)
                )
            )
        self.submitted.append(req)
        job = job_pb2.Job(
            job_id="j1", experiment=req.spec.experiment, method=req.spec.method, state=job_state_pb2.JOB_STATE_QUEUED
        )
        return cs.SubmitJobResponse(job=job, warnings=["heads up"])


@pytest.fixture
def console(monkeypatch: pytest.MonkeyPatch) -> Console:
    fake = Console()

    def client(self: AppState, **_: Any) -> FakeClient:
        return FakeClient(fake.handlers())

    monkeypatch.setattr(AppState, "client", client)
    monkeypatch.setenv("STARFORGE_TOKEN", "sfp_test")
    return fake


def sf(cwd: pathlib.Path, *args: str) -> Any:
    old = os.getcwd()
    os.chdir(cwd)
    try:
        return runner.invoke(app, list(args))
    finally:
        os.chdir(old)


def test_new_custom_and_catalog_methods(lab: pathlib.Path, console: Console) -> None:
    result = sf(lab, "new", "exp2", "--method", "custom/custom")
    assert result.exit_code == 0, result.output
    folder = lab / "experiments/exp2"
    assert sorted(p.name for p in folder.iterdir()) == ["config.yaml", "recipe.lock.json", "train.sh"]
    assert os.access(folder / "train.sh", os.X_OK)
    assert json.loads((folder / "recipe.lock.json").read_text())["digest"] == "c" * 64
    result = sf(lab, "-o", "json", "new", "sft", "--method", "trl/sft", "--framework-version", "0.19.1")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["files"] == ["config.yaml", "recipe.lock.json"]
    assert "lr: 0.001" in (lab / "experiments/sft/config.yaml").read_text()
    assert sf(lab, "new", "exp2", "--method", "custom/custom").exit_code == 2


def test_submit_uploads_then_submits_and_resubmit_uploads_nothing(lab: pathlib.Path, console: Console) -> None:
    result = sf(lab, "submit", "demo", "--profile", "h200:8", "-s", "lr=0.05")
    assert result.exit_code == 0, result.output
    assert "submitted job j1 (demo, custom/custom): QUEUED" in result.stdout
    assert "sf job logs j1 -f" in result.stderr
    assert "warning: heads up" in result.stderr
    assert "uploaded 6 file(s)" in result.stderr
    req = console.submitted[0]
    uuid.UUID(req.request_id)
    assert req.spec.pools[0].profile == "h200:8"
    assert req.spec.overrides[0].key == "lr"
    assert {f.sha256 for f in req.spec.workspace.files} <= set(console.blobs)
    again = sf(lab, "submit", "demo")
    assert "uploaded 0 file(s) (0 B), 6 unchanged" in again.stderr
    assert console.submitted[1].request_id != req.request_id


def test_submit_refusal_prints_bullets_and_exits_3(lab: pathlib.Path, console: Console) -> None:
    result = sf(lab, "submit", "demo", "--no-validate", "-s", "bad=1")  # the server refuses it
    assert result.exit_code == 3
    assert "error: 1 override is wrong" in result.stderr
    assert "  • overrides[0].key: unknown: bad" in result.stderr


def test_bad_override_and_profile_are_refused_before_any_upload(lab: pathlib.Path, console: Console) -> None:
    result = sf(lab, "submit", "demo", "-s", "lrr=0.1")
    assert result.exit_code == 2
    assert "error: -s lrr: config.yaml of this experiment has no key 'lrr'; did you mean lr?" in result.stderr
    result = sf(lab, "submit", "demo", "--profile", "h200:12")
    assert result.exit_code == 2
    assert "12 GPUs do not fill whole h200 nodes" in result.stderr
    assert console.submitted == []
    assert console.blobs == {}


def test_submit_json(lab: pathlib.Path, console: Console) -> None:
    result = sf(lab, "submit", "demo", "-o", "json", "--dry-run")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["job"]["job_id"] == "j1"
    assert doc["dry_run"] is True
    assert doc["warnings"] == ["heads up"]
    assert console.submitted[0].dry_run


def test_submit_follow_exit_code_follows_the_job(lab: pathlib.Path, console: Console) -> None:
    result = sf(lab, "submit", "demo", "-f")
    assert result.exit_code == 1  # the fake job ends FAILED
    assert "hello" in result.stdout
    assert "ended FAILED" in result.stderr


def test_dirty_submit_is_refused_then_allowed(lab: pathlib.Path, console: Console) -> None:
    (lab / "src/model.py").write_text("changed\n")
    assert sf(lab, "submit", "demo").exit_code == 2
    result = sf(lab, "submit", "demo", "--allow-dirty")
    assert result.exit_code == 0
    assert console.submitted[-1].spec.provenance.git_dirty


def test_upgrade_recipe_rewrites_the_lock(lab: pathlib.Path, console: Console) -> None:
    result = sf(lab, "recipe", "upgrade", "demo")
    assert result.exit_code == 0, result.output
    assert json.loads((lab / "experiments/demo/recipe.lock.json").read_text())["digest"] == "c" * 64
    git(lab, "commit", "-q", "-am", "upgrade")
    again = sf(lab, "recipe", "upgrade", "demo")
    assert "already current" in again.stderr
