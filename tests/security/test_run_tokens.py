"""Run tokens against a hostile tenant: the code inside a user's own job, with whatever run token
it could get, against a real console and a real local executor (process runtime, executor as
an unprivileged user; and the Docker runtime).

A run token names one attempt: it reports for that attempt only, reads that attempt's blobs
only, and once the attempt has ended nothing it sends changes the attempt's outcome. The
training command cannot read it (not in any environment, its file deleted, the runner and the
executor non-dumpable), and neither it nor the deployment's HuggingFace token is stored in the
ledger.
"""

from __future__ import annotations

import hashlib
import pathlib
import sqlite3

import grpc
import pytest
from sqlalchemy import select
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.executor.v1 import launch_request_pb2 as lr
from starforge_api.job.v1 import job_state_pb2 as st
from starforge_api.job.v1 import lifecycle_event_pb2 as lc

from control.db import models as m
from tests.integration.backends.docker import DockerEngine
from tests.integration.console import Console
from tests.security.tokens_support import (
    RUN_TOKEN,
    STEAL_PY,
    STEAL_SH,
    WAIT_FOR_GO,
    attempt_token,
    cursor,
    exited,
    log_line,
    phase,
    read_blob,
    reason_of,
    refused,
    report,
    stolen,
    token_console,
    unprivileged_root,
)

pytestmark = pytest.mark.timeout(300)

PLATFORM_HF_TOKEN = "hf_platformOnlyToken0123456789abcdefXYZ"


async def next_seq(c: Console, attempt_id: str) -> int:
    """The seq the console would apply next for `attempt_id` (so that an accepted forgery would
    take effect, not be skipped as a duplicate)."""

    def read(s):  # type: ignore[no-untyped-def]
        cur = s.get(m.IngestCursor, attempt_id)
        return (cur.acked_seq if cur else 0) + 1

    return int(await c.app.ctx.db.run(read))


def forged_exits(first: int, code: int = 0) -> list:  # type: ignore[type-arg]
    """COMMAND_EXITED records from `first` on: whichever seq is next when it arrives applies."""
    return [exited(first + i, code) for i in range(20)]


async def go(c: Console, job_id: str, number: int) -> None:
    """Let attempt `number` of a WAIT_FOR_GO job finish."""
    out = pathlib.Path((await c.get(job_id)).out_dir)
    (out / f"go-{number}").touch()


async def test_a_token_of_attempt_1_cannot_end_attempt_2_after_resume() -> None:
    with unprivileged_root() as root:
        async with token_console(root) as c:
            job = await c.submit_custom(WAIT_FOR_GO)
            running = await c.wait(job.job_id, st.JOB_STATE_RUNNING, timeout=90)
            first = running.attempts[0].attempt_id
            token_1 = await attempt_token(c, job.job_id, first)

            await c.jobs.PauseJob(ctl.PauseJobRequest(job_id=job.job_id), metadata=c.md)
            await c.wait(job.job_id, st.JOB_STATE_PAUSED, timeout=60)
            await c.jobs.ResumeJob(ctl.ResumeJobRequest(job_id=job.job_id), metadata=c.md)
            resumed = await c.wait(job.job_id, st.JOB_STATE_RUNNING, timeout=90)
            second = resumed.attempts[-1].attempt_id
            assert second != first

            # attempt 1's token claims attempt 2 exited 0
            e = await refused(report(c, token_1, second, forged_exits(await next_seq(c, second))))
            assert e.code() == grpc.StatusCode.PERMISSION_DENIED, e
            assert reason_of(e) == "ERROR_REASON_TOKEN_SCOPE"
            e = await refused(cursor(c, token_1, second))
            assert e.code() == grpc.StatusCode.PERMISSION_DENIED, e
            # ... or rewrites its own, paused, attempt 1 as a success
            e = await refused(report(c, token_1, first, forged_exits(await next_seq(c, first))))
            assert e.code() == grpc.StatusCode.PERMISSION_DENIED, e
            assert reason_of(e) == "ERROR_REASON_ATTEMPT_ENDED"

            now = await c.get(job.job_id)
            assert now.state == st.JOB_STATE_RUNNING
            assert [a.state for a in now.attempts] == [st.JOB_STATE_PAUSED, st.JOB_STATE_RUNNING]

            await go(c, job.job_id, 2)
            done = await c.wait(job.job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=90)
            assert done.state == st.JOB_STATE_SUCCEEDED, done.diagnosis
            assert [a.state for a in done.attempts] == [st.JOB_STATE_PAUSED, st.JOB_STATE_SUCCEEDED]
            assert "attempt 2 done" in await c.logs(job.job_id)


async def _steal(c: Console, **config: object) -> dict[str, object]:
    job = await c.submit_custom(
        STEAL_SH, extra_files={"experiments/exp/steal.py": STEAL_PY.encode()}, config=config or None
    )
    done = await c.wait(job.job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=180)
    lines = await c.logs(job.job_id)
    assert done.state == st.JOB_STATE_SUCCEEDED, (done.diagnosis, lines[-30:])
    return stolen(lines)  # reported through the runner: it had the token all along


def _assert_nothing_stolen(found: dict[str, object]) -> None:
    assert found["found"] == [], found
    assert found["env_names"] == [], "no FORGE_INGEST_TOKEN* variable in the training command's env"
    assert found["token_file"] is False, "the runner deleted the token file before the command started"
    runner = found["runner"]
    assert runner, found
    for what in ("environ", "mem", "fd"):
        assert f"{runner} {what}" in found["denied"], (what, found)  # type: ignore[operator]


async def test_b_training_code_cannot_read_the_run_token_process_runtime() -> None:
    with unprivileged_root() as root:
        async with token_console(root) as c:
            found = await _steal(c)
            _assert_nothing_stolen(found)
            # the executor (same user, every attempt's token in its memory) is closed too
            assert c.executor is not None
            if c.executor.pid in found["ancestors"]:  # type: ignore[operator]
                assert f"{c.executor.pid} mem" in found["denied"], found  # type: ignore[operator]


@pytest.mark.docker
async def test_b_training_code_cannot_read_the_run_token_docker_runtime(
    tmp_path: pathlib.Path, dockerd: DockerEngine, python_image: str
) -> None:
    async with token_console(
        tmp_path,
        runtime="docker",
        local={"docker": {"base_url": dockerd.base_url}},
        image_allowlist=[python_image.split(":", maxsplit=1)[0]],
    ) as c:
        # root in the container, but without CAP_SYS_PTRACE: the runner's non-dumpable flag holds
        _assert_nothing_stolen(await _steal(c, image=python_image))


# where the runs report: with every other service on `listen`, or on the ingest port of their own
PORTS = pytest.mark.parametrize("ingest_listen", ["", "127.0.0.1:0"], ids=["listen", "ingest-port"])


@PORTS
async def test_c_a_token_cannot_touch_another_jobs_attempt(ingest_listen: str) -> None:
    with unprivileged_root() as root:
        async with token_console(root, ingest_listen=ingest_listen) as c:
            mine = await c.submit_custom(WAIT_FOR_GO, extra_files={"experiments/exp/mine.txt": b"mine\n"})
            theirs = await c.submit_custom(WAIT_FOR_GO, extra_files={"experiments/exp/theirs.txt": b"theirs\n"})
            mine_running = await c.wait(mine.job_id, st.JOB_STATE_RUNNING, timeout=90)
            theirs_running = await c.wait(theirs.job_id, st.JOB_STATE_RUNNING, timeout=90)
            my_attempt = mine_running.attempts[0].attempt_id
            their_attempt = theirs_running.attempts[0].attempt_id
            token = await attempt_token(c, mine.job_id, my_attempt)

            e = await refused(report(c, token, their_attempt, forged_exits(await next_seq(c, their_attempt), 1)))
            assert e.code() == grpc.StatusCode.PERMISSION_DENIED, e
            assert reason_of(e) == "ERROR_REASON_TOKEN_SCOPE"
            # a clean exit skips the diagnosis' log read, where a failure is refused first: the
            # store itself refuses it
            e = await refused(report(c, token, their_attempt, forged_exits(await next_seq(c, their_attempt), 0)))
            assert e.code() == grpc.StatusCode.PERMISSION_DENIED, e
            assert reason_of(e) == "ERROR_REASON_TOKEN_SCOPE"
            e = await refused(cursor(c, token, their_attempt))
            assert e.code() == grpc.StatusCode.PERMISSION_DENIED, e
            theirs_blob = hashlib.sha256(b"theirs\n").hexdigest()
            e = await refused(read_blob(c, token, theirs_blob))
            assert e.code() == grpc.StatusCode.PERMISSION_DENIED, e
            assert reason_of(e) == "ERROR_REASON_TOKEN_SCOPE"
            # the token itself works, for its own attempt
            assert await read_blob(c, token, hashlib.sha256(b"mine\n").hexdigest()) == b"mine\n"

            assert (await c.get(theirs.job_id)).state == st.JOB_STATE_RUNNING
            await go(c, theirs.job_id, 1)
            await go(c, mine.job_id, 1)
            for job_id in (theirs.job_id, mine.job_id):
                done = await c.wait(job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=90)
                assert done.state == st.JOB_STATE_SUCCEEDED, done.diagnosis
                assert done.attempts[0].exit_code == 0


@PORTS
async def test_d_an_ended_attempts_token_changes_nothing(ingest_listen: str) -> None:
    with unprivileged_root() as root:
        async with token_console(root, ingest_listen=ingest_listen) as c:
            job = await c.submit_custom(WAIT_FOR_GO)
            running = await c.wait(job.job_id, st.JOB_STATE_RUNNING, timeout=90)
            attempt = running.attempts[0].attempt_id
            token = await attempt_token(c, job.job_id, attempt)
            await go(c, job.job_id, 1)
            done = await c.wait(job.job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=90)
            assert done.state == st.JOB_STATE_SUCCEEDED, done.diagnosis

            for record in (
                exited(0, 1),
                phase(0, lc.LIFECYCLE_PHASE_RUNNER_FAILED),
                phase(0, lc.LIFECYCLE_PHASE_COMMAND_STARTED),
            ):
                record.seq = await next_seq(c, attempt)
                e = await refused(report(c, token, attempt, [record]))
                assert e.code() == grpc.StatusCode.PERMISSION_DENIED, e
                assert reason_of(e) == "ERROR_REASON_ATTEMPT_ENDED"
            after = await c.get(job.job_id)
            assert after.state == st.JOB_STATE_SUCCEEDED
            assert (after.attempts[0].state, after.attempts[0].exit_code) == (st.JOB_STATE_SUCCEEDED, 0)
            assert not after.diagnosis.summary

            # Logs may still drain within the token's grace: they change no outcome.
            seq = await next_seq(c, attempt)
            assert await report(c, token, attempt, [log_line(seq, "a late line")]) == [seq]
            assert "a late line" in await c.logs(job.job_id)
            assert (await c.get(job.job_id)).state == st.JOB_STATE_SUCCEEDED


async def test_e_no_platform_hf_token_in_jobs_and_no_plaintext_tokens_in_the_ledger() -> None:
    with unprivileged_root() as root:
        async with token_console(root, hf_token=PLATFORM_HF_TOKEN, hf_endpoint="http://127.0.0.1:9") as c:
            job = await c.submit_custom(
                '#!/usr/bin/env bash\nenv | sort\necho "hf=${HF_TOKEN:-none}"\ncat /proc/$PPID/environ | tr "\\0" "\\n"\n'
            )
            done = await c.wait(job.job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=120)
            lines = await c.logs(job.job_id)
            assert done.state == st.JOB_STATE_SUCCEEDED, (done.diagnosis, lines[-20:])
            assert "hf=none" in lines
            assert not any(PLATFORM_HF_TOKEN in line for line in lines)

            launches = await c.app.ctx.db.run(lambda s: list(s.scalars(select(m.Attempt.launch))))
            assert launches
            for data in launches:
                stored = lr.LaunchRequest.FromString(data)
                assert (stored.ingest.token, stored.blob_source.token) == ("", "")
                assert dict(stored.secret_env) == {}
            db_file = c.app.ctx.cfg.resolved_state_dir / "ledger.db"
            with sqlite3.connect(db_file) as conn:
                conn.execute("PRAGMA wal_checkpoint(FULL)")
            for path in db_file.parent.glob("ledger.db*"):
                raw = path.read_bytes()
                assert PLATFORM_HF_TOKEN.encode() not in raw, path
                assert not RUN_TOKEN.search(raw), path
            # nor anywhere in what the executor keeps for the attempt (the token file is gone)
            for path in (root / "executor").rglob("*"):
                if path.is_file() and not path.is_symlink() and path.suffix != ".pex":
                    assert not RUN_TOKEN.search(path.read_bytes()), path
