"""Packaging through `sf submit`: content-addressed per file, so an unchanged lab uploads nothing."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import pathlib
import re
import subprocess
from typing import Any

import grpc
import httpx
import pytest
from starforge_api.control.v1 import account_service_pb2 as acc
from starforge_api.control.v1 import account_service_pb2_grpc as acc_grpc
from starforge_api.control.v1 import blob_service_pb2 as blob
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.job.v1 import job_spec_pb2, workspace_pb2
from starforge_api.job.v1 import job_state_pb2 as st

from cli.client import Client
from cli.errors import CliError
from cli.lab import find_lab
from cli.output import Output
from cli.pack import ADMITTED_FILE, Pack, pack_lab
from cli.upload import CHUNK, hash_and_upload
from common.channel import bearer
from common.hashing import manifest_digest, manifest_text
from common.rpc_status import from_rpc_error
from control.blobpacks import PACK_MIN_BLOBS
from tests.integration.console import Console, console, git


async def _uploaded_bytes(c) -> float:  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"http://127.0.0.1:{c.app.ops.port}/metrics")).text
    line = next(ln for ln in text.splitlines() if ln.startswith("starforge_blob_bytes_uploaded_total "))
    return float(line.split()[1])


async def test_resubmitting_an_unchanged_lab_uploads_zero_bytes(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path, http_listen="127.0.0.1:0") as c:
        data = "x" * 200_000
        lab = await c.lab("exp", files={"data/big.txt": data, "src/model.py": "print('model')\n"})
        before = await _uploaded_bytes(c)
        first = await c.sf_async("submit", "exp", cwd=lab)
        after_first = await _uploaded_bytes(c)
        assert after_first - before >= len(data)
        second = await c.sf_async("submit", "exp", cwd=lab)
        assert await _uploaded_bytes(c) == after_first, "an unchanged lab must upload 0 bytes"
        assert c.app.ctx.store.stats.blobs_written > 0
        assert first.returncode == second.returncode == 0
        # one changed file uploads just that file
        (lab / "src" / "model.py").write_text("print('model v2')\n")
        r = await c.sf_async("submit", "exp", "--allow-dirty", cwd=lab)
        assert 0 < await _uploaded_bytes(c) - after_first < 100
        assert r.returncode == 0


async def test_a_lab_of_many_small_files_is_packed_and_runs_from_its_packs(tmp_path: pathlib.Path) -> None:
    """Its small files go into one pack on the console (no file per blob); the executor fetches
    them from there, and the job reads every byte."""
    files = {f"data/part-{i:03d}.txt": f"part {i} " * (i + 1) for i in range(PACK_MIN_BLOBS + 8)}
    listing = "".join(f"{hashlib.sha256(text.encode()).hexdigest()}  {path}\n" for path, text in sorted(files.items()))
    train = "#!/usr/bin/env bash\nset -e\nsha256sum data/*.txt\n"  # the workspace is its cwd
    async with console(tmp_path) as c:
        store = c.app.ctx.store
        lab = await c.lab("exp", train, files=files)
        doc = _submitted(await c.sf_async("submit", "exp", "-o", "json", cwd=lab))
        packed = [store.packs.find(hashlib.sha256(t.encode()).hexdigest()) for t in files.values()]
        assert all(packed) and len({p.path for p in packed if p}) == 1, "one pack holds the lab's small files"
        assert not any(store.path(hashlib.sha256(t.encode()).hexdigest()).exists() for t in files.values())
        job_id = doc["job"]["job_id"]
        done = await c.wait(job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=120)
        assert done.state == st.JOB_STATE_SUCCEEDED, done.diagnosis
        printed = [ln for ln in await c.logs(job_id) if "  data/" in ln]
        assert "".join(f"{ln}\n" for ln in printed) == listing


def _submitted(r: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(r.stdout)
    return doc


def _listed_files(doc: dict[str, Any]) -> list[Any]:
    files: list[Any] = doc["job"]["spec"].get("workspace", {}).get("files", [])
    return files


async def test_an_unchanged_lab_is_submitted_by_its_manifest_digest(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path, http_listen="127.0.0.1:0") as c:
        lab = await c.lab("exp", files={"data/a.txt": "a" * 5000, "src/model.py": "print('model')\n"})
        first = _submitted(await c.sf_async("submit", "exp", "-o", "json", cwd=lab))
        n = len(_listed_files(first))  # the full manifest went over the wire
        assert n >= 4
        digest = first["workspace_digest"]
        assert json.loads((lab / ADMITTED_FILE).read_text())["admitted"] == {c.address: digest}

        # unchanged: named by digest; the answer lists no files, the job has the whole manifest
        uploaded = await _uploaded_bytes(c)
        again = _submitted(await c.sf_async("submit", "exp", "-o", "json", cwd=lab))
        assert again["upload"] == {"files_uploaded": 0, "bytes_uploaded": 0, "files_unchanged": n}
        assert _listed_files(again) == []
        assert again["job"]["spec"]["workspace"]["digest"] == digest
        assert await _uploaded_bytes(c) == uploaded
        stored = (await c.get(again["job"]["job_id"])).spec.workspace
        assert stored == (await c.get(first["job"]["job_id"])).spec.workspace
        assert stored.digest == digest and len(stored.files) == n and stored.total_bytes > 5000

        # a blob gone since (deleted from the store): the console notices, sf uploads it again
        gone = next(f for f in stored.files if f.path == "data/a.txt")
        c.app.ctx.store.path(gone.sha256).unlink()
        fallback = _submitted(await c.sf_async("submit", "exp", "-o", "json", cwd=lab))
        assert fallback["upload"]["bytes_uploaded"] == gone.size
        assert len(_listed_files(fallback)) == n
        assert c.app.ctx.store.has(gone.sha256)
        # and the manifest itself gone: the same
        c.app.ctx.store.path(digest).unlink()
        again = _submitted(await c.sf_async("submit", "exp", "-o", "json", cwd=lab))
        assert len(_listed_files(again)) == n and again["upload"]["bytes_uploaded"] == 0
        assert c.app.ctx.store.has(digest)  # kept again by that admission
        assert _listed_files(_submitted(await c.sf_async("submit", "exp", "-o", "json", cwd=lab))) == []


async def test_another_user_cannot_name_a_workspace_by_its_digest(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path, http_listen="127.0.0.1:0") as c:
        lab = await c.lab("exp", files={"secret/weights.bin": "only admin uploaded this\n"})
        # bob's project, which the admin may submit to: the same lab (same manifest) for both
        yaml_path = lab / "starforge.yaml"
        yaml_path.write_text(re.sub(r'project: ".*"', 'project: "@bob/lab"', yaml_path.read_text()))
        git(lab, "commit", "-qam", "bob's project")
        first = _submitted(await c.sf_async("submit", "exp", "-o", "json", cwd=lab))
        digest = first["workspace_digest"]
        admin_job = await c.get(first["job"]["job_id"])
        bob = await _create_user(c, "bob")
        spec = job_spec_pb2.JobSpec()
        spec.CopyFrom(admin_job.spec)
        spec.ClearField("workspace")
        request = ctl.SubmitJobRequest(spec=spec, workspace_digest=digest)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await c.jobs.SubmitJob(request, metadata=bearer(bob))
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert from_rpc_error(refused.value).reason_name == "MISSING_BLOB"
        assert "secret/weights.bin" not in (refused.value.details() or "")

        # bob uploads the manifest's text himself (he learnt its lines): he owns that blob now,
        # but its files are still not his to read
        text = manifest_text((f.path, f.sha256, f.executable) for f in admin_job.spec.workspace.files)
        await c.blobs.UploadBlobs(
            iter([blob.UploadBlobsRequest(blobs=[blob.UploadBlobsRequest.WholeBlob(digest=digest, data=text)])]),
            metadata=bearer(bob),
        )
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await c.jobs.SubmitJob(request, metadata=bearer(bob))
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert from_rpc_error(refused.value).reason_name == "MISSING_BLOB"

        # bob's sf with the admin's lab state (its admitted.json included): refused by digest,
        # so it uploads every file (recorded as bob's) and lists them
        as_bob = dataclasses.replace(c, token=bob)
        r = _submitted(await as_bob.sf_async("submit", "exp", "-o", "json", cwd=lab))
        n = len(admin_job.spec.workspace.files)
        assert r["upload"]["files_uploaded"] == n
        assert len(_listed_files(r)) == n
        assert r["job"]["spec"]["project"] == "@bob/lab"
        # from now on bob's own admission lets him name it
        again = _submitted(await as_bob.sf_async("submit", "exp", "-o", "json", cwd=lab))
        assert _listed_files(again) == [] and again["upload"]["files_uploaded"] == 0


async def _create_user(c: Console, name: str) -> str:
    r = await acc_grpc.AccountServiceStub(c.channel).CreateUser(acc.CreateUserRequest(name=name), metadata=c.md)
    return str(r.token)


async def test_the_pipelined_upload_names_a_file_that_changed(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path) as c:
        large = "L" * (CHUNK + 10)  # hashed first, read again to be sent in chunks
        lab = await c.lab("exp", files={"a/small.txt": "s" * 100, "b/large.bin": large})
        found = find_lab(lab)
        client = Client(c.address, c.token)

        def packed() -> Pack:
            p = pack_lab(found.root, found.settings, defer_hashing=True, use_cache=False)
            assert len(p.unhashed) == len(p.files)  # everything goes through the pipeline
            return p

        # a size that changed after packing, before the file was read and hashed
        pack = packed()
        (lab / "a" / "small.txt").write_text("longer now " * 20)
        with pytest.raises(CliError, match=r"a/small\.txt changed while it was being uploaded"):
            await asyncio.to_thread(hash_and_upload, client, pack, Output())
        (lab / "a" / "small.txt").write_text("s" * 100)

        # content that changed after it was hashed, while the blobs before it were being sent:
        # the console's check of the digest refuses it, and the error names the file
        pack = packed()

        rewritten: list[int] = []

        def rewrite(n: int) -> None:  # once: grpc may still drain the stream after the refusal
            if not rewritten:
                rewritten.append(n)
                (lab / "b" / "large.bin").write_text("M" * len(large))

        with pytest.raises(CliError, match=r"b/large\.bin changed while it was being uploaded"):
            await asyncio.to_thread(hash_and_upload, client, pack, Output(), rewrite)
        (lab / "b" / "large.bin").write_text(large)

        # unchanged: every file hashed and sent in one pass, the manifest complete
        pack = packed()
        stats = await asyncio.to_thread(hash_and_upload, client, pack, Output())
        assert not pack.unhashed and len(pack.manifest.files) == len(pack.files)
        assert pack.manifest.digest == manifest_digest((f.path, f.sha256, f.executable) for f in pack.files)
        assert stats.files_uploaded + stats.files_unchanged == len(pack.files)
        for f in pack.files:
            assert c.app.ctx.store.read_bytes(f.sha256) == (lab / f.path).read_bytes()
        client.close()


async def test_a_submission_that_declares_no_digest_keeps_no_manifest(tmp_path: pathlib.Path) -> None:
    # A raw client may leave the manifest digest empty (admission fills it in). Only a declared
    # digest is kept for submitting by digest later: otherwise every such call would cost a blob
    # write and an owner row (the admission storm of a raw client).
    async with console(tmp_path) as c:
        job = await c.submit_custom("#!/usr/bin/env bash\necho hi\n")
        digest = (await c.get(job.job_id)).spec.workspace.digest
        assert digest and not c.app.ctx.store.has(digest)


async def _as_user(c: Console, name: str) -> Console:
    return dataclasses.replace(c, token=await _create_user(c, name), extra={**c.extra, "user": name})


async def _upload_manifest_text(c: Console, manifest: Any) -> str:
    """Upload a manifest's canonical text as a plain blob (what any user may do); its digest."""
    text = manifest_text((f.path, f.sha256, f.executable) for f in manifest.files)
    digest = manifest_digest((f.path, f.sha256, f.executable) for f in manifest.files)
    await c.blobs.UploadBlobs(
        iter([blob.UploadBlobsRequest(blobs=[blob.UploadBlobsRequest.WholeBlob(digest=digest, data=text)])]),
        metadata=c.md,
    )
    return digest


async def _submit(
    c: Console, digest: str = "", workspace: workspace_pb2.WorkspaceManifest | None = None
) -> ctl.SubmitJobResponse:
    """SubmitJob of a custom job with `workspace` listed, or named by `digest`."""
    spec = job_spec_pb2.JobSpec(
        api_version="forge/v2",
        project=f"@{c.extra.get('user', 'admin')}/lab",
        experiment="exp",
        method="custom/custom",
        recipe_lock=await c.lock(),
        config_json=json.dumps({"image": "host", "observability": "platform"}),
        workspace=workspace,
    )
    response: ctl.SubmitJobResponse = await c.jobs.SubmitJob(
        ctl.SubmitJobRequest(spec=spec, workspace_digest=digest), metadata=c.md
    )
    return response


async def _refused(call: Any) -> Any:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call
    return refused.value


@pytest.mark.usefixtures("ledger")
async def test_a_workspace_record_spares_only_the_user_it_was_admitted_for(tmp_path: pathlib.Path) -> None:
    # The console remembers that alice was admitted with workspace D (her files readable, every
    # path rule passed) and skips those checks when she names D again; bob, who learnt D's lines
    # and uploaded them as his own blob, must still be refused, and so must alice once a blob of
    # D is gone from the store.
    async with console(tmp_path) as c:
        alice, bob = await _as_user(c, "alice"), await _as_user(c, "bob")
        files = {"experiments/exp/train.sh": b"#!/usr/bin/env bash\necho hi\n", "data/a.txt": b"alice's own\n"}
        manifest = await alice.upload(files, {"experiments/exp/train.sh"})
        manifest.digest = manifest_digest((f.path, f.sha256, f.executable) for f in manifest.files)
        digest = manifest.digest
        first = (await _submit(alice, workspace=manifest)).job  # declares its digest: kept as alice's
        assert (await alice.get(first.job_id)).spec.workspace.digest == digest
        for _ in range(2):  # the first by-digest admission checks everything, the second uses the record
            again = (await _submit(alice, digest)).job
            assert again.spec.workspace.digest == digest and not again.spec.workspace.files
            assert len((await alice.get(again.job_id)).spec.workspace.files) == 2

        assert await _upload_manifest_text(bob, manifest) == digest
        for _ in range(2):
            err = await _refused(_submit(bob, digest))
            assert from_rpc_error(err).reason_name == "MISSING_BLOB"

        gone = next(f for f in manifest.files if f.path == "data/a.txt")
        c.app.ctx.store.path(gone.sha256).unlink()
        err = await _refused(_submit(alice, digest))
        assert from_rpc_error(err).reason_name == "MISSING_BLOB"


async def test_an_uploaded_manifest_that_breaks_a_path_rule_is_refused_every_time(tmp_path: pathlib.Path) -> None:
    # A blob the user uploaded whose text is a manifest is not an admitted one: its paths are
    # checked each time it is named, and a refusal leaves no record that would skip them.
    async with console(tmp_path) as c:
        files = {"experiments/exp/train.sh": b"#!/usr/bin/env bash\necho hi\n", "conf/.env": b"TOKEN=x\n"}
        manifest = await c.upload(files, {"experiments/exp/train.sh"})
        digest = await _upload_manifest_text(c, manifest)
        for _ in range(2):
            err = await _refused(_submit(c, digest))
            assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert from_rpc_error(err).reason_name == "SENSITIVE_FILE"
