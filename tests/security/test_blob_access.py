"""Blob access follows ownership: a tenant cannot read or probe another user's content by digest.

Real console (control plane + its HTTP port) and a real local executor process. The victim
`alice` submits a lab with `sf`; the attacker `mallory` (a normal user's personal access token)
knows the digest of alice's data file and tries gRPC ReadBlob, HTTP GET, FindMissingBlobs and a
job that references the digest without uploading it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import pathlib
import secrets
import urllib.error
import urllib.request
from collections.abc import AsyncIterator

import grpc
import pytest
from starforge_api.control.v1 import blob_service_pb2 as blob
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.job.v1 import job_spec_pb2, workspace_pb2
from starforge_api.job.v1 import job_state_pb2 as st

from common.channel import bearer
from control.blobpacks import PACK_MIN_BLOBS
from tests.integration.console import Console, console
from tests.security.identity_support import new_user, refused

TRAIN = "#!/usr/bin/env bash\ncat data/secret.txt\n"


async def http_get(c: Console, digest: str, token: str) -> tuple[int, bytes]:
    """GET /v1/blobs/<digest> in a thread (the in-process control plane keeps serving)."""
    return await asyncio.to_thread(_http_get, c, digest, token)


def _http_get(c: Console, digest: str, token: str) -> tuple[int, bytes]:
    req = urllib.request.Request(
        f"{c.app.ctx.public_http_url}/v1/blobs/{digest}", headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


async def read_blob(c: Console, digest: str, token: str) -> bytes:
    out = b""
    async for r in c.blobs.ReadBlob(blob.ReadBlobRequest(digest=digest), metadata=bearer(token), timeout=30):
        out += r.data
    return out


async def missing(c: Console, digests: list[str], token: str) -> list[str]:
    r = await c.blobs.FindMissingBlobs(blob.FindMissingBlobsRequest(digests=digests), metadata=bearer(token))
    return list(r.missing_digests)


async def submit(c: Console, lab: pathlib.Path) -> dict[str, object]:
    r = await c.sf_async("-o", "json", "submit", "exp", "--profile", "cpu", cwd=lab)
    doc: dict[str, object] = json.loads(r.stdout)
    return doc


@pytest.mark.parametrize("packed", [False, True], ids=["loose", "packed"])
async def test_another_users_blob_cannot_be_read_or_probed(tmp_path: pathlib.Path, packed: bool) -> None:
    """`packed`: alice's lab has enough small files that the console stores them in one pack."""
    async with console(tmp_path, http_listen="127.0.0.1:0") as c:
        alice_token, mallory = await new_user(c, "alice"), await new_user(c, "mallory")
        alice = dataclasses.replace(c, token=alice_token)
        secret = f"alice's private data {secrets.token_hex(16)}\n"
        digest = hashlib.sha256(secret.encode()).hexdigest()
        unknown = hashlib.sha256(secrets.token_bytes(32)).hexdigest()
        filler = {f"data/part-{i}.txt": f"part {i}\n" for i in range(PACK_MIN_BLOBS if packed else 0)}
        lab = await alice.lab("exp", TRAIN, files={"data/secret.txt": secret, **filler})
        first = await submit(alice, lab)
        assert (c.app.ctx.store.packs.find(digest) is not None) == packed
        upload = first["upload"]
        assert isinstance(upload, dict) and upload["bytes_uploaded"] > 0
        job = first["job"]
        assert isinstance(job, dict)

        # gRPC ReadBlob and HTTP GET: the same NOT_FOUND as content that does not exist.
        told = await refused(read_blob(c, digest, mallory), grpc.StatusCode.NOT_FOUND)
        assert told == (await refused(read_blob(c, unknown, mallory), grpc.StatusCode.NOT_FOUND)).replace(
            unknown, digest
        )
        status, body = await http_get(c, digest, mallory)
        assert status == 404 and secret.encode() not in body
        assert (await http_get(c, unknown, mallory))[0] == 404

        # FindMissingBlobs does not tell whether someone stored the content.
        assert await missing(c, [digest, unknown], mallory) == [digest, unknown]

        # A job cannot borrow the digest either: it must be uploaded by its submitter.
        spec = job_spec_pb2.JobSpec(
            api_version="forge/v2",
            project="@mallory/lab",
            experiment="steal",
            method="custom/custom",
            recipe_lock=await c.lock(),
            config_json=json.dumps({"image": "host", "observability": "platform"}),
            workspace=workspace_pb2.WorkspaceManifest(
                files=[workspace_pb2.WorkspaceFile(path="data/secret.txt", sha256=digest, size=len(secret))]
            ),
        )
        await refused(
            c.jobs.SubmitJob(ctl.SubmitJobRequest(spec=spec), metadata=bearer(mallory)),
            grpc.StatusCode.FAILED_PRECONDITION,
            "MISSING_BLOB",
        )

        # The owner still reads it, over gRPC and HTTP, and her job ran on it.
        assert await read_blob(c, digest, alice_token) == secret.encode()
        assert await http_get(c, digest, alice_token) == (200, secret.encode())
        assert await missing(c, [digest, unknown], alice_token) == [unknown]
        done = await c.wait(str(job["job_id"]), st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=120)
        assert done.state == st.JOB_STATE_SUCCEEDED, done
        assert secret.strip() in await c.logs(done.job_id)

        # An unchanged lab uploads nothing for the same user.
        again = await submit(alice, lab)
        assert again["upload"] == {
            "files_uploaded": 0,
            "bytes_uploaded": 0,
            "files_unchanged": upload["files_unchanged"] + upload["files_uploaded"],
        }


async def test_a_reupload_makes_the_content_yours_without_touching_the_owner(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path) as c:
        alice, mallory = await new_user(c, "alice"), await new_user(c, "mallory")
        data = f"shared content {secrets.token_hex(8)}".encode()
        digest = hashlib.sha256(data).hexdigest()

        async def put(token: str) -> blob.UploadBlobsResponse:
            async def one() -> AsyncIterator[blob.UploadBlobsRequest]:
                yield blob.UploadBlobsRequest(digest=digest, size=len(data), data=data, finish=True)

            r: blob.UploadBlobsResponse = await c.blobs.UploadBlobs(one(), metadata=bearer(token))
            return r

        assert (await put(alice)).blobs_written == 1
        assert await missing(c, [digest], mallory) == [digest]
        # mallory had the bytes all along: her upload is accepted (already present) and recorded.
        assert (await put(mallory)).blobs_already_present == 1
        assert await missing(c, [digest], mallory) == []
        assert await read_blob(c, digest, mallory) == data
        assert await read_blob(c, digest, alice) == data
