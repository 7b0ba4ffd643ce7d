"""Service authentication: executor services need their token, and no body is read before auth.

Real processes: `starforge-executor` (local kind, process runtime), the control plane as
`python -m control.main`, a victim job running on the executor. The attacker holds no token, a
wrong one, or a normal user's personal access token.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest
import yaml
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.control.v1 import control_service_pb2_grpc as ctl_grpc
from starforge_api.executor.v1 import executor_service_pb2 as ex_pb
from starforge_api.executor.v1 import executor_service_pb2_grpc as ex_grpc
from starforge_api.executor.v1 import launch_request_pb2 as lr_pb
from starforge_api.job.v1 import job_spec_pb2
from starforge_api.job.v1 import job_state_pb2 as st

from common.channel import aio_channel, bearer
from tests.integration.console import EXECUTOR_TOKEN, REPO, console, start_executor_process
from tests.reliability.harness import ControlProcess, ExecutorProcess
from tests.security.identity_support import create_user, new_user, peak_rss_kib, refused

UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED
Metadata = tuple[tuple[str, str], ...]
Call = Callable[[grpc.aio.Channel, Metadata], Any]
BIG = 56 * 1000 * 1000
UNDER_LIMIT = 30 * 1000 * 1000
# A 56 MB body is refused by the transport before it is buffered whole (gRPC core reads some
# ~25 MB before it sees the limit; less than the body is the property). (A 30 MB one, under the 32 MiB
# these methods accept, may be buffered by gRPC core before the interceptor refuses it unparsed,
# so its peak is not bounded here.) Parsed, a 30 MB body costs far more than this.
MAX_GROWTH_KIB = 48 * 1024


def run_executor(config: pathlib.Path, listen: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "executor_svc.main", "--kind", "local", "--config", str(config), "--listen", listen],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if not k.startswith("STARFORGE_")},
        check=False,
    )


def local_config(tmp_path: pathlib.Path, **keys: object) -> pathlib.Path:
    path = tmp_path / "executor.yaml"
    section = {"runtime": "process", "state_dir": str(tmp_path / "state")}
    path.write_text(yaml.safe_dump({**keys, "local": section}))
    return path


def test_executor_service_refuses_to_start_without_a_token(tmp_path: pathlib.Path) -> None:
    r = run_executor(local_config(tmp_path), "127.0.0.1:0")
    assert r.returncode == 2, r.stderr
    assert "token: required" in r.stderr and "insecure: true" in r.stderr

    # tls.plaintext passes the TLS rule (not loopback, no TLS), so the token rule is what refuses
    r = run_executor(local_config(tmp_path, insecure=True, tls={"plaintext": True}), "0.0.0.0:0")
    assert r.returncode == 2, r.stderr
    assert "insecure: true is allowed only on a loopback listen address" in r.stderr

    # insecure on loopback: the single-machine setup still starts (and is stopped by its PID).
    proc, address = start_executor_process(tmp_path, local_config(tmp_path, insecure=True))
    try:
        assert address.startswith("127.0.0.1:")
    finally:
        proc.terminate()
        proc.wait(30)


async def test_executor_calls_without_the_token_are_refused_and_the_victim_runs_on(tmp_path: pathlib.Path) -> None:
    release = tmp_path / "release"
    script = (
        "#!/usr/bin/env bash\necho victim-secret-line\n"
        f"for _ in $(seq 1200); do [ -e {release} ] && break; sleep 0.1; done\necho victim done\n"
    )
    async with console(tmp_path / "c") as c:
        job = await c.submit_custom(script)
        running = await c.wait(job.job_id, st.JOB_STATE_RUNNING)
        attempt = running.attempts[-1].attempt_id
        mallory = await new_user(c, "mallory")
        async with aio_channel(c.executor_address) as ch:
            stub = ex_grpc.ExecutorServiceStub(ch)
            for md in ((), bearer("wrong-token"), bearer(mallory)):
                await refused(stub.ListAttempts(ex_pb.ListAttemptsRequest(), metadata=md, timeout=10), UNAUTHENTICATED)
                await refused(
                    stub.Stop(ex_pb.StopRequest(attempt_id=attempt), metadata=md, timeout=10), UNAUTHENTICATED
                )
                await refused(
                    stub.Cleanup(ex_pb.CleanupRequest(attempt_id=attempt), metadata=md, timeout=10), UNAUTHENTICATED
                )
        release.touch()
        done = await c.wait(job.job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=120)
        assert done.state == st.JOB_STATE_SUCCEEDED, done
        assert "victim done" in await c.logs(job.job_id)


@pytest.fixture
async def control_process(tmp_path: pathlib.Path) -> AsyncIterator[tuple[ControlProcess, ExecutorProcess]]:
    executor = ExecutorProcess(tmp_path)
    executor.start()
    control = ControlProcess(tmp_path, executor.address)
    control.start()
    try:
        yield control, executor
    finally:
        control.stop()
        executor.stop()


async def test_a_56mb_unauthenticated_body_is_never_parsed(
    control_process: tuple[ControlProcess, ExecutorProcess],
) -> None:
    control, executor = control_process

    def submit(size: int) -> Call:
        request = ctl.SubmitJobRequest(spec=job_spec_pb2.JobSpec(config_json="x" * size))
        return lambda ch, md: ctl_grpc.ControlServiceStub(ch).SubmitJob(request, metadata=md, timeout=60)

    def launch(size: int) -> Call:
        request = lr_pb.LaunchRequest(attempt_id="j0000000000000.1", env={"X": "y" * size})
        return lambda ch, md: ex_grpc.ExecutorServiceStub(ch).Launch(request, metadata=md, timeout=60)

    async with aio_channel(control.address) as ch:
        mallory = bearer(await create_user(ch, control.token, "mallory"))
        # Warm up: both processes have served real calls (imports, pools) before the measurement.
        await ctl_grpc.ControlServiceStub(ch).ListJobs(ctl.ListJobsRequest(), metadata=mallory, timeout=30)
    async with aio_channel(executor.address) as ch:
        await ex_grpc.ExecutorServiceStub(ch).ListAttempts(
            ex_pb.ListAttemptsRequest(), metadata=bearer(EXECUTOR_TOKEN), timeout=30
        )

    # 56 MB (the attack) and 30 MB (under the 32 MiB these methods accept, so only the
    # authentication-first interceptor keeps it from being received and parsed).
    for proc, address, make in ((control.proc, control.address, submit), (executor.proc, executor.address, launch)):
        assert proc is not None
        async with aio_channel(address) as ch:
            await ch.channel_ready()
            before = peak_rss_kib(proc.pid)
            for md in ((), bearer("sfp_aaaaaaaaaa_" + "b" * 43), bearer("wrong-executor-token")):
                await refused(make(BIG)(ch, md), UNAUTHENTICATED)
            grown = peak_rss_kib(proc.pid) - before
            assert grown < MAX_GROWTH_KIB, f"{address}: peak RSS grew by {grown} KiB on refused 56 MB bodies"
            # under the transport limit gRPC core may buffer the body, but it is refused unparsed
            for md in ((), bearer("sfp_aaaaaaaaaa_" + "b" * 43), bearer("wrong-executor-token")):
                await refused(make(UNDER_LIMIT)(ch, md), UNAUTHENTICATED)
        assert proc.poll() is None

    async with aio_channel(control.address) as ch:
        # An authenticated caller gets the method's own limit, checked before parsing.
        oversized = ctl.GetJobRequest(job_id="j" + "x" * (5 * 1024 * 1024))
        await refused(
            ctl_grpc.ControlServiceStub(ch).GetJob(oversized, metadata=mallory, timeout=60),
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "MESSAGE_TOO_LARGE",
        )
        # The measurement sees a body that is parsed: the same 30 MB from an authenticated user
        # is received and parsed (then refused by admission), and the peak grows.
        assert control.proc is not None
        before = peak_rss_kib(control.proc.pid)
        with pytest.raises(grpc.aio.AioRpcError):
            await submit(UNDER_LIMIT)(ch, mallory)
        grown = peak_rss_kib(control.proc.pid) - before
        assert grown > MAX_GROWTH_KIB, f"a parsed 30 MB body grew the peak by {grown} KiB only"


async def test_bytes_that_do_not_parse_are_invalid_argument_and_log_nothing(
    control_process: tuple[ControlProcess, ExecutorProcess],
) -> None:
    """A caller's garbage is its own error: INVALID_ARGUMENT, not an internal error that writes a
    traceback to the server's log for every message an attacker sends."""
    control, executor = control_process
    garbage = b"\xff\xff\xff\xff"

    async def send(address: str, method: str, md: Metadata, *, streaming: bool = False) -> grpc.aio.AioRpcError:
        async with aio_channel(address) as ch:
            if streaming:

                async def one() -> AsyncIterator[bytes]:
                    yield garbage

                call = ch.stream_stream(method, lambda b: b, lambda b: b)(one(), metadata=md, timeout=30)
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await call.read()
                return err.value
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await ch.unary_unary(method, lambda b: b, lambda b: b)(garbage, metadata=md, timeout=30)
            return err.value

    async with aio_channel(control.address) as ch:
        mallory = bearer(await create_user(ch, control.token, "mallory2"))
    logged = (control.log.stat().st_size, executor.log.stat().st_size)
    for address, method, md, streaming in (
        (control.address, "/starforge.control.v1.ControlService/GetJob", mallory, False),
        (control.address, "/starforge.control.v1.ControlService/SubmitJob", mallory, False),
        (control.address, "/starforge.control.v1.BlobService/UploadBlobs", mallory, True),
        (executor.address, "/starforge.executor.v1.ExecutorService/Launch", bearer(EXECUTOR_TOKEN), False),
    ):
        err = await send(address, method, md, streaming=streaming)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (method, err)
        assert "does not parse" in (err.details() or ""), (method, err)
    for path, before in zip((control.log, executor.log), logged, strict=True):
        with path.open("rb") as f:
            f.seek(before)
            added = f.read().decode(errors="replace")
        assert "unexpected error" not in added and "Traceback" not in added, added[-2000:]
