"""An executor backend that hangs or fails: the control plane keeps its deadlines and its word.

The backend is `FaultyExecutor`, a test double of an external backend served by the real
`ExecutorServicer` on a real gRPC server: its Launch hangs, or answers UNAVAILABLE or INTERNAL, as
each test scripts it. The control plane (in this process, `executor_deadline_seconds=1`, at most 3
dispatch tries per attempt) must:

- answer GetJob/ListJobs within a second while launches hang (deadlines everywhere);
- treat a hang (DEADLINE_EXCEEDED) and UNAVAILABLE as transient: the attempt records its tries
  and the same LaunchRequest is sent again, at most 3 times;
- end an attempt whose launch failed with INTERNAL, or ran out of tries, as FAILED with class
  INFRA, retry the job with a new attempt within its retry budget, and when the budget is spent
  leave the job FAILED with a clear INFRA diagnosis.
"""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import pytest
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.executor.v1 import executor_service_pb2 as ex_pb
from starforge_api.executor.v1 import executor_service_pb2_grpc as ex_grpc
from starforge_api.executor.v1 import launch_request_pb2 as lr_pb
from starforge_api.job.v1 import job_state_pb2 as st

from common import errors
from common.server import create_server, service
from control.scheduler import dispatch
from executor_svc.base import Capabilities, Executor, LaunchResult, Observation, SeriesInventory
from executor_svc.service import ExecutorServicer
from tests.integration.console import Console
from tests.reliability.harness import control_config, inprocess_console

DEADLINE = 1.0
TRIES = 3

# What Launch does on the n-th call (1-based) for an attempt: "hang", "unavailable", "internal", "ok".
Script = Callable[[lr_pb.LaunchRequest, int], str]


class FaultyExecutor(Executor):
    """Test double of an external backend (see module docstring). Launches that succeed are
    observed as SUCCEEDED with exit code 0 at once; there is no capsule."""

    kind = "local"

    def __init__(self, script: Script) -> None:
        self.script = script
        self.calls: Counter[str] = Counter()
        self.launched: set[str] = set()
        self.hanging = 0

    async def describe(self) -> Capabilities:
        return Capabilities(kind="local", runtime="process", inventory=(SeriesInventory("cpu", 1, 0, 0),))

    async def launch(self, request: lr_pb.LaunchRequest) -> LaunchResult:
        self.calls[request.attempt_id] += 1
        action = self.script(request, self.calls[request.attempt_id])
        if action == "hang":
            self.hanging += 1
            try:
                await asyncio.sleep(3600)
            finally:
                self.hanging -= 1
        if action == "unavailable":
            raise errors.Unavailable("the backend's API server is down")
        if action == "internal":
            raise RuntimeError("the backend crashed handling the request")  # -> INTERNAL with an incident id
        self.launched.add(request.attempt_id)
        return LaunchResult(backend_handle=f"fake-{request.attempt_id}", node="fake")

    async def observe(self, attempt_ids: Sequence[str]) -> list[Observation]:
        return [
            Observation(a, state=st.JOB_STATE_SUCCEEDED, exit_code=0, backend_handle=f"fake-{a}")
            if a in self.launched
            else Observation.missing(a)
            for a in attempt_ids
        ]

    async def stop(self, attempt_id: str, grace_seconds: float) -> bool:
        return False

    async def cleanup(self, attempt_id: str) -> int:
        return 0

    async def list_attempts(self) -> list[Observation]:
        return await self.observe(sorted(self.launched))


@contextlib.asynccontextmanager
async def faulty_console(
    root: pathlib.Path, script: Script, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Console, FaultyExecutor]]:
    monkeypatch.setattr(dispatch, "MAX_DISPATCH_TRIES", TRIES)
    backend = FaultyExecutor(script)
    server, port, _ = await create_server(
        "127.0.0.1:0",
        [
            service(
                ExecutorServicer(backend),
                ex_grpc.add_ExecutorServiceServicer_to_server,
                ex_pb.DESCRIPTOR.services_by_name["ExecutorService"],
            )
        ],
    )
    await server.start()
    try:
        cfg = control_config(root, f"127.0.0.1:{port}", executor_deadline_seconds=DEADLINE)
        async with inprocess_console(root, None, cfg) as c:
            yield c, backend
    finally:
        await server.stop(0)


async def _finished(c: Console, job_id: str, timeout: float) -> ctl.GetJobResponse:
    job = await c.wait(job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=timeout)
    return ctl.GetJobResponse(job=job)


class Latency:
    """GetJob and ListJobs in a loop, each with a 1 s deadline; records how long each answer took."""

    def __init__(self, c: Console, job_id: str) -> None:
        self.c, self.job_id = c, job_id
        self.samples: list[float] = []
        self.errors: list[str] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        calls: tuple[Callable[[], Awaitable[object]], ...] = (
            lambda: self.c.jobs.GetJob(ctl.GetJobRequest(job_id=self.job_id), metadata=self.c.md, timeout=1.0),
            lambda: self.c.jobs.ListJobs(ctl.ListJobsRequest(page_size=100), metadata=self.c.md, timeout=1.0),
        )
        while True:
            for call in calls:
                t0 = time.monotonic()
                try:
                    await call()
                except Exception as e:
                    self.errors.append(repr(e)[:200])
                self.samples.append(time.monotonic() - t0)
            await asyncio.sleep(0.1)

    def __enter__(self) -> Latency:
        self._task = asyncio.ensure_future(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_hanging_launches_keep_the_control_plane_responsive_and_fail_the_job_as_infra(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with faulty_console(tmp_path, lambda _a, _n: "hang", monkeypatch) as (c, backend):
        jobs = [await c.submit_custom("#!/usr/bin/env bash\necho hi\n", retry_budget=1) for _ in range(6)]
        with Latency(c, jobs[0].job_id) as latency:
            while not backend.hanging:
                await asyncio.sleep(0.05)
            done = [await _finished(c, j.job_id, timeout=120) for j in jobs]
        assert not latency.errors, latency.errors[:3]
        assert len(latency.samples) > 50 and max(latency.samples) < 1.0, max(latency.samples)
        for r in done:
            job = r.job
            assert job.state == st.JOB_STATE_FAILED
            assert job.diagnosis.failure_class == st.FAILURE_CLASS_INFRA, job.diagnosis
            assert f"could not launch on fleet local after {TRIES} tries" in job.diagnosis.summary, job.diagnosis
            # the budget: one retry, so two attempts, each sent exactly TRIES times, both INFRA
            assert [a.number for a in job.attempts] == [1, 2] and job.retries_used == 1
            assert all(a.failure_class == st.FAILURE_CLASS_INFRA for a in job.attempts), job.attempts
            assert [backend.calls[a.attempt_id] for a in job.attempts] == [TRIES, TRIES]
        assert not backend.launched


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_unavailable_then_recovering_backend_launches_once_and_internal_errors_retry_as_infra(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # attempt 1 of `flaky`: two UNAVAILABLE answers, then it launches (same attempt, no new one);
    # `broken`: INTERNAL on attempt 1, fine on attempt 2; `gone`: INTERNAL on every attempt.
    plan = {
        "flaky": {(1, 1): "unavailable", (1, 2): "unavailable"},
        "broken": {(1, 1): "internal"},
        "gone": {(1, 1): "internal", (2, 1): "internal"},
    }

    def script(request: lr_pb.LaunchRequest, n: int) -> str:
        return plan[request.spec.experiment].get((request.attempt_number, n), "ok")

    async with faulty_console(tmp_path, script, monkeypatch) as (c, backend):
        flaky = await c.submit_custom("#!/usr/bin/env bash\necho hi\n", experiment="flaky")
        broken = await c.submit_custom("#!/usr/bin/env bash\necho hi\n", experiment="broken", retry_budget=2)
        gone = await c.submit_custom("#!/usr/bin/env bash\necho hi\n", experiment="gone", retry_budget=1)
        f = (await _finished(c, flaky.job_id, 60)).job
        b = (await _finished(c, broken.job_id, 60)).job
        g = (await _finished(c, gone.job_id, 60)).job
    assert f.state == st.JOB_STATE_SUCCEEDED and len(f.attempts) == 1, f
    assert backend.calls[f.attempts[0].attempt_id] == 3
    assert b.state == st.JOB_STATE_SUCCEEDED and [a.number for a in b.attempts] == [1, 2], b
    assert b.attempts[0].failure_class == st.FAILURE_CLASS_INFRA, b.attempts[0]
    assert "the executor failed the launch" in b.attempts[0].reason, b.attempts[0].reason
    assert g.state == st.JOB_STATE_FAILED and g.retries_used == 1 and len(g.attempts) == 2, g
    assert g.diagnosis.failure_class == st.FAILURE_CLASS_INFRA, g.diagnosis
    # every launched attempt was launched exactly once
    assert backend.launched == {f.attempts[0].attempt_id, b.attempts[1].attempt_id}
    assert all(backend.calls[a] == 1 for a in backend.launched - {f.attempts[0].attempt_id})
