"""SubmitJob and WatchJob as a raw API client sees them (no `sf`): every bad field in one
BadRequest, the workspace manifest's digest and total_bytes checked against the files it lists,
and a replayed event carrying the job as it was after that event."""

from __future__ import annotations

import json
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.job.v1 import job_spec_pb2
from starforge_api.job.v1 import job_state_pb2 as st

from common.hashing import manifest_digest
from common.rpc_status import from_rpc_error
from tests.integration.console import Console, console

TRAIN = "experiments/exp/train.sh"
TERMINAL = {st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, st.JOB_STATE_STOPPED}


@pytest.fixture
async def c(tmp_path: pathlib.Path) -> AsyncIterator[Console]:
    async with console(tmp_path) as c:
        yield c


async def spec(c: Console, files: dict[str, bytes] | None = None, **fields: Any) -> job_spec_pb2.JobSpec:
    manifest = await c.upload(files or {TRAIN: b"#!/usr/bin/env bash\necho hi\n"}, {TRAIN})
    base: dict[str, Any] = {
        "api_version": "forge/v2",
        "project": "@admin/lab",
        "experiment": "exp",
        "method": "custom/custom",
        "recipe_lock": await c.lock(),
        "config_json": json.dumps({"image": "host", "observability": "platform"}),
        "workspace": manifest,
    }
    return job_spec_pb2.JobSpec(**{**base, **fields})


async def refusal(c: Console, s: job_spec_pb2.JobSpec) -> Any:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await c.jobs.SubmitJob(ctl.SubmitJobRequest(spec=s), metadata=c.md)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    listed = await c.jobs.ListJobs(ctl.ListJobsRequest(owner="*"), metadata=c.md)
    assert list(listed.jobs) == []  # nothing queued
    return from_rpc_error(info.value)


async def test_three_bad_fields_are_three_violations(c: Console) -> None:
    s = await spec(c, api_version="forge/v1", retry_budget=-1, labels={"bad key!": "x"})
    err = await refusal(c, s)
    fields = [v.field for v in err.field_violations]
    assert fields == ["spec.api_version", "spec.retry_budget", "spec.labels['bad key!']"]
    assert err.reason_name == "INVALID_ARGUMENT"
    assert err.message.startswith("3 fields of the job are invalid: spec.api_version: ")
    for v in err.field_violations:
        assert v.field in err.message and v.description


async def test_one_bad_field_keeps_its_reason_and_message(c: Console) -> None:
    s = await spec(c, labels={"": "x"})
    err = await refusal(c, s)
    assert [v.field for v in err.field_violations] == ["spec.labels['']"]
    assert err.message.startswith("label key '' is not valid")


async def test_a_manifest_cannot_claim_another_workspaces_digest(c: Console) -> None:
    other = await spec(c, files={TRAIN: b"#!/usr/bin/env bash\necho other\n"})
    s = await spec(c)
    s.workspace.digest = other.workspace.digest or manifest_digest(
        (f.path, f.sha256, f.executable) for f in other.workspace.files
    )
    err = await refusal(c, s)
    assert [v.field for v in err.field_violations] == ["spec.workspace.digest"]

    s = await spec(c)
    s.workspace.total_bytes = s.workspace.files[0].size + 1
    err = await refusal(c, s)
    assert [v.field for v in err.field_violations] == ["spec.workspace.total_bytes"]


async def test_a_file_size_must_be_its_blobs(c: Console) -> None:
    s = await spec(c)
    s.workspace.files[0].size += 10
    s.workspace.total_bytes = 0  # left to the server
    err = await refusal(c, s)
    assert [v.field for v in err.field_violations] == ["spec.workspace.files[0].size"]


async def test_the_recorded_digest_is_always_the_files(c: Console) -> None:
    s = await spec(c)
    expected = manifest_digest((f.path, f.sha256, f.executable) for f in s.workspace.files)
    s.workspace.digest, s.workspace.total_bytes = "", 0  # a raw client may leave them to the server
    job = (await c.jobs.SubmitJob(ctl.SubmitJobRequest(spec=s), metadata=c.md)).job
    got = (await c.jobs.GetJob(ctl.GetJobRequest(job_id=job.job_id), metadata=c.md)).job.spec.workspace
    assert (got.digest, got.total_bytes) == (expected, s.workspace.files[0].size)

    s2 = await spec(c)
    s2.workspace.digest, s2.workspace.total_bytes = expected, s2.workspace.files[0].size
    assert (await c.jobs.SubmitJob(ctl.SubmitJobRequest(spec=s2), metadata=c.md)).job.job_id


def test_the_server_digest_is_the_packers() -> None:
    """`sf` (cli.pack) and the server compute one digest for the same files."""
    from cli.pack import PackedFile
    from cli.pack import manifest_digest as packer_digest

    files = [
        PackedFile("b/run.sh", pathlib.Path("/x"), "b" * 64, 3, True),
        PackedFile("a.txt", pathlib.Path("/y"), "a" * 64, 5, False),
    ]
    assert manifest_digest((f.path, f.sha256, f.executable) for f in files) == packer_digest(files)


async def test_watch_replays_each_event_with_the_job_as_it_was_then(c: Console) -> None:
    job = await c.submit_custom("#!/usr/bin/env bash\necho hi\n")
    done = await c.wait(job.job_id, st.JOB_STATE_SUCCEEDED)
    replay = [r async for r in c.jobs.WatchJob(ctl.WatchJobRequest(job_id=job.job_id), metadata=c.md)]
    events = [r.event for r in replay]
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert [e.to_state for e in events][-1] == st.JOB_STATE_SUCCEEDED and len(events) >= 4
    seen_attempt = False
    for r in replay:
        assert r.job.state == r.event.to_state, (r.event, r.job.state)
        assert r.job.update_time == r.event.time
        assert r.job.HasField("end_time") == (r.event.to_state in TERMINAL)
        seen_attempt = seen_attempt or bool(r.event.attempt_id)
        # An attempt appears with its first event, in the state that event gave it.
        assert [a.attempt_id for a in r.job.attempts] == ([done.attempts[0].attempt_id] if seen_attempt else [])
        for a in r.job.attempts:
            assert a.state == r.event.to_state
            assert a.HasField("end_time") == (a.state in TERMINAL)
    assert list(replay[-1].job.attempts) == list(done.attempts)

    # Resumed after a sequence: the same past jobs, from there on.
    after = [r async for r in c.jobs.WatchJob(ctl.WatchJobRequest(job_id=job.job_id, after_sequence=2), metadata=c.md)]
    assert [(r.event, r.job.state) for r in after] == [(r.event, r.job.state) for r in replay[2:]]


async def test_the_authorization_scheme_is_case_insensitive(c: Console) -> None:
    for scheme in ("bearer", "BEARER", "Bearer"):
        md = (("authorization", f"{scheme} {c.token}"),)
        info = await c.jobs.GetServerInfo(ctl.GetServerInfoRequest(), metadata=md)
        assert info.user == "admin"
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await c.jobs.GetServerInfo(ctl.GetServerInfoRequest(), metadata=(("authorization", f"Basic {c.token}"),))
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_thousands_of_bad_fields_still_make_one_readable_refusal(c: Console) -> None:
    """The violations travel in a trailer that clients cap: the first ones and a count arrive."""
    s = await spec(c)
    digest = s.workspace.files[0].sha256
    for i in range(2000):
        s.workspace.files.add(path=f"../escape-{i:04d}", sha256=digest, size=s.workspace.files[0].size)
    err = await refusal(c, s)
    assert len(err.field_violations) == 20
    assert err.field_violations[0].field == "spec.workspace.files[1].path"
    assert err.message.startswith("2000 fields of the job are invalid: spec.workspace.files[1].path: ")
    assert err.message.endswith("(and 1995 more)")
