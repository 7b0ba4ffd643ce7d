"""The ledger read before admission (blob ownership, dataset versions) is skipped only when the
ledger has nothing to add: a workspace its submitter was admitted with, no dataset named, and no
manifest digest declared whose ownership the console must know. Another user's submission of the
same files is still read, and refused."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
from typing import Any

import grpc
import pytest
from starforge_api.control.v1 import account_service_pb2 as acc
from starforge_api.control.v1 import account_service_pb2_grpc as acc_grpc
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.job.v1 import job_spec_pb2, workspace_pb2

from common.hashing import manifest_digest
from common.rpc_status import from_rpc_error
from control import jobs_api
from tests.integration.console import Console, console

pytestmark = pytest.mark.usefixtures("ledger")

TRAIN_SH = b"echo hi\n"


async def _as_new_user(c: Console, name: str) -> Console:
    r = await acc_grpc.AccountServiceStub(c.channel).CreateUser(acc.CreateUserRequest(name=name), metadata=c.md)
    return dataclasses.replace(c, token=str(r.token), extra={**c.extra, "user": name})


async def _spec(
    c: Console, user: str, config: dict[str, Any], *, upload: Console | None = None
) -> job_spec_pb2.JobSpec:
    """A custom job listing train.sh, uploaded by `upload` (nobody when None: the files were
    uploaded before, by whoever did)."""
    files = {"experiments/exp/train.sh": TRAIN_SH}
    if upload is not None:
        manifest = await upload.upload(files, set(files))
    else:
        manifest = workspace_pb2.WorkspaceManifest()
        manifest.files.add(
            path="experiments/exp/train.sh",
            sha256=hashlib.sha256(TRAIN_SH).hexdigest(),
            size=len(TRAIN_SH),
            executable=True,
        )
    return job_spec_pb2.JobSpec(
        api_version="forge/v2",
        project=f"@{user}/lab",
        experiment="exp",
        method="custom/custom",
        recipe_lock=await c.lock(),
        config_json=json.dumps({"image": "host", "observability": "platform", **config}),
        workspace=manifest,
    )


async def _refusal(c: Console, spec: job_spec_pb2.JobSpec) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await c.jobs.SubmitJob(ctl.SubmitJobRequest(spec=spec), metadata=c.md)
    return refused.value.code(), from_rpc_error(refused.value).reason_name


async def test_a_workspace_its_submitter_was_admitted_with_skips_only_the_read_it_needs_not(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[tuple[str, bool]] = []
    real = jobs_api._readable_and_pinned

    def counted(s: Any, principal: Any, spec: job_spec_pb2.JobSpec, known: bool) -> Any:
        reads.append((principal.user, known))
        return real(s, principal, spec, known)

    monkeypatch.setattr(jobs_api, "_readable_and_pinned", counted)
    async with console(tmp_path) as admin:
        bob = await _as_new_user(admin, "bob")
        carol = await _as_new_user(admin, "carol")

        # bob's first submission of his files is read (his ownership of every file)
        spec = await _spec(bob, "bob", {"model": "m1"}, upload=bob)
        first = (await bob.jobs.SubmitJob(ctl.SubmitJobRequest(spec=spec), metadata=bob.md)).job
        assert reads == [("bob", False)]
        assert first.spec.model == "m1"  # config.yaml's model, filled in before admission

        # the same files again: nothing to ask the ledger, and a job like the first comes of it
        again = (await bob.jobs.SubmitJob(ctl.SubmitJobRequest(spec=spec), metadata=bob.md)).job
        assert reads == [("bob", False)]
        assert again.job_id != first.job_id
        assert again.spec.model == "m1" and again.spec.workspace == first.spec.workspace

        # carol lists bob's files (she learnt their digests) without uploading them: read, refused
        stolen = await _spec(carol, "carol", {})
        assert await _refusal(carol, stolen) == (grpc.StatusCode.FAILED_PRECONDITION, "MISSING_BLOB")
        assert reads[-1] == ("carol", False)

        # bob's known files naming a dataset: read, so that its version is pinned (none exists)
        with_dataset = await _spec(bob, "bob", {"data": {"train": {"dataset": "bob/nothing"}}})
        code, _ = await _refusal(bob, with_dataset)
        assert code == grpc.StatusCode.NOT_FOUND
        assert reads[-1] == ("bob", True)  # read for the dataset, not for the files

        # bob's known files declaring their manifest digest: read, for his ownership of that blob
        declared = await _spec(bob, "bob", {})
        declared.workspace.digest = manifest_digest((f.path, f.sha256, f.executable) for f in declared.workspace.files)
        n = len(reads)
        await bob.jobs.SubmitJob(ctl.SubmitJobRequest(spec=declared), metadata=bob.md)
        assert reads[n:] == [("bob", False)]  # his files too, as before any of this


async def test_a_bad_config_of_a_known_workspace_is_refused_as_before(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path) as admin:
        bob = await _as_new_user(admin, "bob")
        spec = await _spec(bob, "bob", {}, upload=bob)
        await bob.jobs.SubmitJob(ctl.SubmitJobRequest(spec=spec), metadata=bob.md)
        spec.config_json = "{not json"
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await bob.jobs.SubmitJob(ctl.SubmitJobRequest(spec=spec), metadata=bob.md)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "config is not valid JSON" in (refused.value.details() or "")
