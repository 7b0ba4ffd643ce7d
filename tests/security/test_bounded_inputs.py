"""Bounded work per input: no single line, record, blob, connection or burst of submissions from a
tenant makes the control plane slow (or large) for everyone else.

Each test is the hostile tenant: a normal user's personal token, or the code inside that user's
own job. Nothing here asserts a duration: the properties are sizes (stored line length, bytes
dropped, RSS, thread counts) and completion of work that, unbounded, would not complete at all
within generous deadlines.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import re
import socket
import subprocess
import sys
import urllib.request
from typing import Any

import grpc
import pytest
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.control.v1 import error_reason_pb2 as er
from starforge_api.job.v1 import job_spec_pb2
from starforge_api.job.v1 import job_state_pb2 as st

from common import errors
from common.rpc_status import from_rpc_error
from control.db import models as m
from tests.integration.console import REPO, console
from tests.ports import free_port
from tests.security.limits_support import (
    control_process,
    rss_bytes,
    tenant,
    thread_count,
    zeros_chunks,
    zeros_digest,
)

LINE = 16384
DONE = (st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, st.JOB_STATE_STOPPED)

# 10 lines of 64 KiB (the runner's own line limit) that the old `image .* not present` pattern
# backtracked over quadratically, then a failing exit: the diagnosis reads them.
QUADRATIC_JOB = """#!/usr/bin/env bash
python3 - <<'EOF'
import sys
for i in range(10):
    sys.stdout.write(("image " * 11000)[:65536] + "\\n")
sys.stdout.flush()
EOF
exit 3
"""


async def test_long_lines_are_cut_and_the_diagnosis_reads_a_bounded_tail(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path, max_log_line_bytes=LINE) as c:
        mallory = await tenant(c, "mallory")
        bob = await tenant(c, "bob")
        victim = await bob.submit_custom("#!/usr/bin/env bash\necho bob was here\n", experiment="victim")
        job = await mallory.submit_custom(QUADRATIC_JOB, experiment="flood")

        # while the flood is ingested and diagnosed, another user's calls are answered
        for _ in range(5):
            info = await bob.jobs.GetServerInfo(ctl.GetServerInfoRequest(), metadata=bob.md, timeout=60)
            assert info.version
            mine = await bob.jobs.ListJobs(ctl.ListJobsRequest(), metadata=bob.md, timeout=60)
            assert [j.job_id for j in mine.jobs] == [victim.job_id]

        done = await mallory.wait(job.job_id, *DONE, timeout=120)
        assert done.state == st.JOB_STATE_FAILED, done
        # the diagnosis completed: exit code 3, user code (the lines name no missing image)
        assert done.diagnosis.failure_class == st.FAILURE_CLASS_USER_CODE, done.diagnosis
        assert done.diagnosis.exit_code == 3
        assert all(len(ln.encode()) <= LINE + 64 for ln in done.diagnosis.log_tail)

        flood = [ln for ln in await mallory.logs(job.job_id) if ln.startswith("image")]
        assert len(flood) == 10, [ln[:80] for ln in flood]
        marker = f"… [starforge: line cut, {65536 - LINE} bytes dropped]"
        for ln in flood:
            kept, _, tail = ln.partition("…")
            assert len(kept.encode()) == LINE
            assert ("image " * 11000).startswith(kept)  # what was kept is exactly what was printed
            assert "…" + tail == marker

        assert (await bob.wait(victim.job_id, *DONE)).state == st.JOB_STATE_SUCCEEDED


def test_the_diagnosis_of_a_huge_hostile_tail_completes() -> None:
    """The rules on 200 lines of 256 KiB of "image image ..." (what an executor's tail or an old
    database row could hold): bounded input and linear patterns finish in well under a second;
    the old quadratic pattern needed over an hour for this input, far past the deadline."""
    program = (
        "from control import diagnosis\n"
        "d = diagnosis.diagnose(exit_code=1, log_tail=[('image ' * 45000)] * 200)\n"
        "print(d.failure_class, max(len(x) for x in d.log_tail))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=REPO, capture_output=True, text=True, timeout=120, check=True
    )
    failure_class, longest = done.stdout.split()
    assert int(failure_class) == st.FAILURE_CLASS_USER_CODE
    assert int(longest) <= 16384


QUOTA = 64 * 1024
CHATTY_JOB = """#!/usr/bin/env bash
python3 - <<'EOF'
for i in range(200):
    print(f"line-{i:04d} " + "x" * 1000, flush=True)
EOF
echo finished
"""


async def test_a_job_over_its_log_quota_gets_one_marker_and_still_finishes(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path, log_quota_bytes_per_job=QUOTA) as c:
        mallory = await tenant(c, "mallory")
        job = await mallory.submit_custom(CHATTY_JOB, experiment="chatty")
        done = await mallory.wait(job.job_id, *DONE, timeout=120)
        assert done.state == st.JOB_STATE_SUCCEEDED, done

        lines = await mallory.logs(job.job_id)
        markers = [ln for ln in lines if "reached its quota" in ln]
        assert markers == [
            f"starforge: this job's log reached its quota of {QUOTA} bytes; later lines are not stored "
            "(the job counts the bytes dropped)"
        ]
        printed = [f"line-{i:04d} " + "x" * 1000 for i in range(200)]
        stored = [ln for ln in lines if ln.startswith("line-")]
        # a prefix of what was printed: nothing lost below the quota, nothing twice, no holes
        assert stored == printed[: len(stored)]
        assert 0 < len(stored) < 200
        assert "finished" not in lines

        row = await c.app.ctx.db.run(lambda s: s.get(m.Job, job.job_id))
        assert row is not None
        assert row.log_bytes <= QUOTA
        not_stored = sum(len(p) for p in printed[len(stored) :]) + len("finished")
        assert row.log_dropped_bytes >= not_stored


async def test_admission_reads_a_bounded_prefix_of_listed_blobs(tmp_path: pathlib.Path) -> None:
    size = 256 << 20
    async with control_process(tmp_path) as (control, c):
        mallory = await tenant(c, "mallory")
        digest = zeros_digest(size)
        await mallory.blobs.UploadBlobs(zeros_chunks(digest, size), metadata=mallory.md, timeout=600)
        # a .pypirc of blank lines: `^\s*` from every line start was quadratic over them
        blank = b"\n" * (1 << 20)
        manifest = await mallory.upload(
            {"experiments/exp/train.sh": b"#!/usr/bin/env bash\necho ok\n", "b/.pypirc": blank},
            {"experiments/exp/train.sh"},
        )
        for path in ("a/.npmrc", "c/.npmrc", "d/.npmrc"):
            manifest.files.add(path=path, sha256=digest, size=size)
        spec = job_spec_pb2.JobSpec(
            api_version="forge/v2",
            project="@mallory/lab",
            experiment="exp",
            method="custom/custom",
            recipe_lock=await mallory.lock(),
            config_json=json.dumps({"image": "host", "observability": "platform"}),
            workspace=manifest,
        )
        assert control.proc is not None
        before = rss_bytes(control.proc.pid)
        r = await mallory.jobs.SubmitJob(ctl.SubmitJobRequest(spec=spec), metadata=mallory.md, timeout=120)
        after = rss_bytes(control.proc.pid)
        assert r.job.job_id
        assert after - before < 100 << 20, (before, after)


async def test_half_open_http_connections_take_no_threads_and_time_out(tmp_path: pathlib.Path) -> None:
    port = free_port()
    async with control_process(
        tmp_path, http_listen=f"127.0.0.1:{port}", http_header_timeout_seconds=2.0, http_max_connections=32
    ) as (control, _):
        assert control.proc is not None
        pid = control.proc.pid
        base = thread_count(pid)
        conns = []
        for i in range(400):
            s = socket.create_connection(("127.0.0.1", port))
            if i % 2:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # a head that never ends
            conns.append(s)
        # the port still answers (after every connection above was accepted, in order)
        assert await asyncio.to_thread(_get, port, "/healthz") == (200, b"ok\n")
        assert thread_count(pid) < base + 32, (base, thread_count(pid))
        # each idle or unfinished connection is answered 408 and closed after the header timeout
        answers = await asyncio.gather(*(asyncio.to_thread(_until_closed, s) for s in conns))
        assert all(a.startswith(b"HTTP/1.0 408") for a in answers), {a[:30] for a in answers}
        # a head that trickles in (one byte at a time) is cut off too: the deadline is for the head
        trickle = socket.create_connection(("127.0.0.1", port))
        assert await asyncio.to_thread(_trickle_until_closed, trickle)
        # an oversized head is refused without being read further
        big = socket.create_connection(("127.0.0.1", port))
        big.sendall(b"GET /healthz HTTP/1.0\r\nX-Pad: " + b"a" * 40000 + b"\r\n\r\n")
        assert (await asyncio.to_thread(_until_closed, big)).startswith(b"HTTP/1.0 431")
        assert await asyncio.to_thread(_get, port, "/healthz") == (200, b"ok\n")
        assert await asyncio.to_thread(_get, port, "/metrics") == (200, None)


def _get(port: int, path: str) -> tuple[int, bytes | None]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=60) as r:
        body = r.read()
        return r.status, body if path == "/healthz" else None


def _until_closed(s: socket.socket) -> bytes:
    s.settimeout(60)
    got = b""
    with s:
        while chunk := s.recv(4096):
            got += chunk
    return got


def _trickle_until_closed(s: socket.socket) -> bool:
    """Send a head one byte every 0.2 s; True once the server answered 408 and closed (it must
    before the 300 bytes, a minute, are sent: far past the 2 s header deadline)."""
    head = b"GET /healthz HTTP/1.0\r\nX-Slow: " + b"a" * 300
    s.settimeout(0.2)
    got = b""
    with s:
        for byte in head:
            try:
                s.sendall(bytes([byte]))
                chunk = s.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return got.startswith(b"HTTP/1.0 408")
            if not chunk:
                return got.startswith(b"HTTP/1.0 408")
            got += chunk
    return False


async def test_a_burst_of_submissions_is_refused_with_retry_info(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path, submit_rate_per_user=0.01, submit_burst_per_user=3) as c:
        mallory = await tenant(c, "mallory")
        bob = await tenant(c, "bob")
        train = "#!/usr/bin/env bash\necho hi\n"
        admitted = [await mallory.submit_custom(train, experiment=f"e{i}") for i in range(3)]
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await mallory.submit_custom(train, experiment="e3")
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        err = from_rpc_error(refused.value)
        assert isinstance(err, errors.ResourceExhausted)
        assert err.reason == er.ERROR_REASON_SUBMIT_RATE_LIMITED
        sentence = "too many submissions: @mallory may make at most 0.01 submissions per second (bursts of 3)"
        assert re.fullmatch(re.escape(sentence) + r"; retry in \d+(\.\d)? s", err.message), err.message
        assert [(q.subject, q.description) for q in err.quota_violations] == [
            ("user:mallory", "at most 0.01 submissions per second, bursts of 3")
        ]
        assert err.retry_after_seconds is not None and 0 < err.retry_after_seconds <= 100

        # another user, and the admin, are not slowed by mallory's burst
        theirs = await bob.submit_custom(train, experiment="bob")
        ours = await c.submit_custom(train, experiment="admin")
        for j in [*admitted, theirs, ours]:
            assert (await c.wait(j.job_id, *DONE)).state == st.JOB_STATE_SUCCEEDED

        # `sf submit` shows the sentence, not a traceback
        lab = await mallory.lab("again", train_sh=train)
        out = await mallory.sf_async("submit", "again", cwd=lab, check=False)
        assert out.returncode != 0
        assert "may make at most 0.01 submissions per second" in out.stderr, out.stderr
        assert "Traceback" not in out.stderr + out.stdout


async def test_a_user_holding_many_log_streams_is_refused_more_and_nobody_else_is(tmp_path: pathlib.Path) -> None:
    """The attacker opens log follows until refused: the next StreamJobLogs or WatchJob is
    RESOURCE_EXHAUSTED at once (STREAM_LIMITED, a QuotaFailure); the admin is still served; a
    stream closed makes room again; `sf job logs -f` shows the sentence."""
    async with console(tmp_path, streams_per_user=3) as c:
        mallory = await tenant(c, "mallory")
        job = await mallory.submit_custom("#!/usr/bin/env bash\necho ready\nsleep 120\n")
        await c.wait(job.job_id, st.JOB_STATE_RUNNING)
        follow = ctl.StreamJobLogsRequest(job_id=job.job_id, follow=True, tail_lines=1)

        async def first_line(md: tuple[tuple[str, str], ...]) -> tuple[Any, str]:
            """A follow stream of the job, once it has delivered a line (the console counts it)."""
            call = c.jobs.StreamJobLogs(follow, metadata=md)
            while True:  # the first line is stored a moment after the job starts running
                got = await asyncio.wait_for(call.read(), 30)
                if got.lines:
                    return call, got.lines[-1].text

        held = [await first_line(mallory.md) for _ in range(3)]
        assert all(text for _, text in held)

        refused = []
        for extra in (
            c.jobs.StreamJobLogs(follow, metadata=mallory.md),
            c.jobs.WatchJob(ctl.WatchJobRequest(job_id=job.job_id), metadata=mallory.md),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await asyncio.wait_for(extra.read(), 30)
            refused.append(from_rpc_error(e.value))
        for err in refused:
            assert isinstance(err, errors.ResourceExhausted), err
            assert err.reason == er.ERROR_REASON_STREAM_LIMITED
            assert err.message.startswith("too many open streams: @mallory already holds 3 log and watch streams")
            assert [(q.subject, q.description) for q in err.quota_violations] == [
                ("user:mallory", "at most 3 log and watch streams open at once")
            ]

        # the admin (exempt) still follows the same job
        admin_call, text = await first_line(c.md)
        assert text
        admin_call.cancel()

        # `sf job logs -f` over the limit: one sentence, a non-zero exit, no traceback
        out = await mallory.sf_async("job", "logs", "-f", job.job_id, check=False)
        assert out.returncode != 0
        assert "too many open streams: @mallory" in out.stderr, out.stderr
        assert "Traceback" not in out.stderr + out.stdout

        # a stream closed makes room (its end is counted once the console has seen the cancel)
        held[0][0].cancel()
        deadline = asyncio.get_running_loop().time() + 10
        while True:
            try:
                again, text = await first_line(mallory.md)
                break
            except grpc.aio.AioRpcError as e:
                if e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED or asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(0.1)
        assert text
        for call, _ in [*held[1:], (again, "")]:
            call.cancel()
        await c.jobs.StopJob(ctl.StopJobRequest(job_id=job.job_id), metadata=c.md)
