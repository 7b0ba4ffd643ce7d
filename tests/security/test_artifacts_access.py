"""Artifacts as an attacker sees them: another user's token, a job's own run token, hostile paths,
and a job that fills its FORGE_OUT_DIR with links to /etc, to the executor's state, to its own
scratch dir (where the run token file lives while the runner starts) and to another job's out
dir, plus a FIFO. Real processes: the control plane and a `starforge-executor --kind local`
running each job as its own uid.

What must hold: only the job's owner (and admins) list or download; paths are relative without
".."; no link is followed, in the listing, on the way to a file or at it; a FIFO neither blocks
nor is served; a user's token is refused by the executor service itself.
"""

from __future__ import annotations

import json
import pathlib

import grpc
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.executor.v1 import executor_service_pb2 as ex_pb
from starforge_api.executor.v1 import executor_service_pb2_grpc as ex_grpc
from starforge_api.job.v1 import artifact_pb2
from starforge_api.job.v1 import job_state_pb2 as st

from common.channel import aio_channel, bearer
from control import auth
from tests.integration.console import Console
from tests.security.identity_support import refused
from tests.security.isolation_support import finish, isolated_console, out_dir, state_dir, submit, user
from tests.security.secrets_support import sf_async

VICTIM = """#!/usr/bin/env bash
set -eu
echo victim-secret-4711 > "$FORGE_OUT_DIR/secret.txt"
"""

# The attacker's job knows the victim's job id (passed in a file) and links everything it can.
ATTACKER = """#!/usr/bin/env bash
set -eu
victim=$(cat experiments/exp/victim)
cd "$FORGE_OUT_DIR"
echo mine > ok.txt
ln -s /etc/passwd passwd
ln -s /etc etc
ln -s "$FORGE_OUT_DIR/../$victim" victim
ln -s "../$victim/secret.txt" victim-secret
ln -s "$FORGE_OUT_DIR/../../attempts" attempts
ln -s "$FORGE_SCRATCH_DIR" scratch
mkdir sub
ln -s /etc/shadow sub/shadow
mkfifo fifo
echo linked
"""

LINKS = {"passwd", "etc", "victim", "victim-secret", "attempts", "scratch", "sub/shadow"}


async def _list(c: Console, job_id: str) -> list[artifact_pb2.Artifact]:
    r = await c.jobs.ListJobArtifacts(ctl.ListJobArtifactsRequest(job_id=job_id), metadata=c.md, timeout=60)
    return list(r.artifacts)


async def _download(c: Console, job_id: str, path: str, offset: int = 0) -> bytes:
    data = b""
    request = ctl.DownloadJobArtifactRequest(job_id=job_id, path=path, offset=offset)
    async for chunk in c.jobs.DownloadJobArtifact(request, metadata=c.md, timeout=60):
        data += chunk.data
    return data


async def _first(call: object) -> object:
    async for item in call:  # type: ignore[attr-defined]
        return item
    return None


async def test_artifacts_refuse_other_users_run_tokens_links_and_bad_paths(tmp_path: pathlib.Path) -> None:
    async with isolated_console() as admin:
        alice, mallory = await user(admin, "alice"), await user(admin, "mallory")
        victim = await submit(alice, VICTIM)
        assert (await finish(alice, victim.job_id)).state == st.JOB_STATE_SUCCEEDED
        files = {"experiments/exp/victim": victim.job_id}
        attacker = await submit(mallory, ATTACKER, files=files)
        done = await finish(mallory, attacker.job_id)
        assert done.state == st.JOB_STATE_SUCCEEDED, await mallory.logs(attacker.job_id)

        # Another user: the job does not exist for them (list and download); an admin sees it.
        for call in (_list(mallory, victim.job_id), _download(mallory, victim.job_id, "secret.txt")):
            await refused(call, grpc.StatusCode.NOT_FOUND)
        assert await _download(alice, victim.job_id, "secret.txt") == b"victim-secret-4711\n"
        assert [a.path for a in await _list(admin, victim.job_id)] == ["secret.txt"]

        # A job's run token (what the code in a job could hold) cannot call the job API at all.
        attempt_id = done.attempts[-1].attempt_id
        run_token = await admin.app.ctx.db.run(
            lambda s: auth.issue_run_token(s, "mallory", attacker.job_id, attempt_id)
        )
        as_job = Console(admin.app, run_token, admin.root, None, admin.executor_address, admin.channel)
        await refused(_list(as_job, attacker.job_id), grpc.StatusCode.PERMISSION_DENIED, "TOKEN_SCOPE")
        await refused(_download(as_job, victim.job_id, "secret.txt"), grpc.StatusCode.PERMISSION_DENIED)

        # The listing shows links as links (never their targets' content) and leaves the FIFO out.
        listed = {a.path: a for a in await _list(mallory, attacker.job_id)}
        assert set(listed) == {"ok.txt", *LINKS}, sorted(listed)
        for path in LINKS:
            assert listed[path].kind == artifact_pb2.ARTIFACT_KIND_SYMLINK, path
            assert (listed[path].size, listed[path].sha256) == (0, ""), path
        assert listed["ok.txt"].kind == artifact_pb2.ARTIFACT_KIND_FILE

        # No link is followed: at the file, or as a directory on the way; the FIFO does not block.
        for path in (
            "passwd",
            "etc/passwd",
            "victim/secret.txt",
            "victim-secret",
            "sub/shadow",
            f"attempts/{attempt_id}/attempt.json",
            "scratch",
            "fifo",
            "sub",
        ):
            details = await refused(_download(mallory, attacker.job_id, path), grpc.StatusCode.FAILED_PRECONDITION)
            assert "root:" not in details and "victim-secret-4711" not in details
        # Paths outside the out dir are refused before anything is opened.
        for path in (
            "../" + victim.job_id + "/secret.txt",
            "/etc/passwd",
            "ok.txt/../../" + victim.job_id + "/secret.txt",
            "./ok.txt",
            "a//b",
            "x" * 5000,
            "ok\x00.txt",
        ):
            await refused(_download(mallory, attacker.job_id, path), grpc.StatusCode.INVALID_ARGUMENT)
        await refused(_download(mallory, attacker.job_id, "nope.txt"), grpc.StatusCode.NOT_FOUND)
        await refused(_download(mallory, attacker.job_id, "ok.txt", offset=999), grpc.StatusCode.INVALID_ARGUMENT)
        await refused(_download(mallory, attacker.job_id, "ok.txt", offset=-1), grpc.StatusCode.INVALID_ARGUMENT)
        r = mallory.jobs.ListJobArtifacts(
            ctl.ListJobArtifactsRequest(job_id=attacker.job_id, page_size=100_000), metadata=mallory.md
        )
        await refused(r, grpc.StatusCode.INVALID_ARGUMENT)
        r = mallory.jobs.ListJobArtifacts(
            ctl.ListJobArtifactsRequest(job_id=attacker.job_id, page_token="../x"), metadata=mallory.md
        )
        await refused(r, grpc.StatusCode.INVALID_ARGUMENT)

        # `sf job download` of everything fetches the one real file and no link target.
        dest = tmp_path / "dl"
        r2 = await sf_async(mallory, mallory.token, "-o", "json", "job", "download", attacker.job_id, "--to", str(dest))
        assert [f["path"] for f in json.loads(r2.stdout)["files"]] == ["ok.txt"]
        assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*")) == ["ok.txt"]
        r2 = await sf_async(
            mallory, mallory.token, "job", "download", attacker.job_id, "passwd", "--to", str(dest), check=False
        )
        assert r2.returncode != 0 and "link" in r2.stderr and "root:" not in r2.stdout + r2.stderr

        # The victim's file and the executor's state are untouched by all of this.
        assert (out_dir(admin, victim.job_id) / "secret.txt").read_text() == "victim-secret-4711\n"
        assert (state_dir(admin) / "attempts" / attempt_id / "attempt.json").exists()

        # A user's token never reaches the executor service: it wants the executor token.
        async with aio_channel(admin.executor_address) as channel:
            stub = ex_grpc.ExecutorServiceStub(channel)
            req = ex_pb.ListArtifactsRequest(attempt_id=f"{victim.job_id}.1", out_key=victim.job_id)
            await refused(
                stub.ListArtifacts(req, metadata=bearer(alice.token), timeout=10), grpc.StatusCode.UNAUTHENTICATED
            )
            read = ex_pb.ReadArtifactRequest(attempt_id=f"{victim.job_id}.1", out_key=victim.job_id, path="secret.txt")
            await refused(
                _first(stub.ReadArtifact(read, metadata=bearer(mallory.token), timeout=10)),
                grpc.StatusCode.UNAUTHENTICATED,
            )
