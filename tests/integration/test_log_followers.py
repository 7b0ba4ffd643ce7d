"""`StreamJobLogs(follow)` followers served from the console's in-memory log tails
(control.telemetry.log_tail): every line exactly once and in order, whether it came from memory or
from the ledger (a follower behind the tail, lines another replica stored), and the tail dropped
when the job ends.

The jobs are RUNNING in the ledger on a fleet the console does not serve (the reconciler leaves
them alone, as in bench `followers`); their lines come through the real IngestService.Report path
with a run token, as a capsule sends them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import pathlib
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from sqlalchemy import event
from sqlalchemy.orm import Session
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.control.v1 import control_service_pb2_grpc as ctl_grpc
from starforge_api.ingest.v1 import ingest_service_pb2 as pb
from starforge_api.ingest.v1 import ingest_service_pb2_grpc as pb_grpc
from starforge_api.job.v1 import job_state_pb2 as st
from starforge_api.job.v1 import lifecycle_event_pb2 as lc
from starforge_api.job.v1 import telemetry_pb2

from common import ids
from common.channel import aio_channel, bearer
from control import auth, jobs_api
from control.app import ControlApp, start_control
from control.db import models as m
from control.ledger import state_machine as sm
from control.services import ingest_service
from tests.db import create_pg_database, drop_pg_database
from tests.integration.console import Console, console

pytestmark = pytest.mark.usefixtures("ledger")

FLEET = "elsewhere"  # not one of the console's fleets: the reconciler leaves the attempt alone


@dataclasses.dataclass
class Run:
    job_id: str
    attempt_id: str
    token: str
    seq: int = 0


async def running_job(app: ControlApp, owner: str = "admin") -> Run:
    """A job RUNNING in the ledger, as dispatch leaves it, with its attempt's run token."""

    def create(s: Session) -> Run:
        now = time.time()
        job_id = ids.new_job_id()
        s.add(
            m.Job(
                id=job_id, owner=owner, project=f"@{owner}/lab", experiment="exp", method="custom/custom",
                state=sm.RUNNING, spec=b"", pools=b"", created_at=now, updated_at=now, attempts_count=1, fleet=FLEET,
            )
        )  # fmt: skip
        attempt_id = ids.attempt_id(job_id, 1)
        s.add(m.Attempt(id=attempt_id, job_id=job_id, number=1, state=sm.RUNNING, fleet=FLEET, created_at=now))
        return Run(job_id, attempt_id, auth.issue_run_token(s, owner, job_id, attempt_id))

    return await app.ctx.db.run(create)


async def report(address: str, run: Run, *lines: str, exit_code: int | None = None) -> None:
    """One Report batch of one log record (and the command's exit when `exit_code` is set), acked."""
    req = pb.ReportRequest(attempt_id=run.attempt_id)
    if lines:
        run.seq += 1
        rec = req.records.add(seq=run.seq)
        rec.time.GetCurrentTime()
        rec.log_chunk.stream = telemetry_pb2.LOG_STREAM_STDOUT
        rec.log_chunk.lines.extend(lines)
    if exit_code is not None:
        run.seq += 1
        rec = req.records.add(seq=run.seq)
        rec.time.GetCurrentTime()
        rec.lifecycle.phase = lc.LIFECYCLE_PHASE_COMMAND_EXITED
        rec.lifecycle.exit_code = exit_code

    async def one() -> AsyncIterator[pb.ReportRequest]:
        yield req

    channel = aio_channel(address)
    try:
        acks = [r async for r in pb_grpc.IngestServiceStub(channel).Report(one(), metadata=bearer(run.token))]
    finally:
        await channel.close(None)
    assert acks and acks[-1].acked_seq == run.seq


@dataclasses.dataclass
class Follower:
    lines: list[tuple[int, int, str]] = dataclasses.field(default_factory=list)
    final_state: int = 0


async def follow(c: Console, address: str, job_id: str, f: Follower, **request: Any) -> None:
    """Follows the job until its final state, recording every line received."""
    channel = aio_channel(address)
    try:
        stub = ctl_grpc.ControlServiceStub(channel)
        req = ctl.StreamJobLogsRequest(job_id=job_id, follow=True, **request)
        async for r in stub.StreamJobLogs(req, metadata=c.md):
            f.lines += [(line.attempt_number, line.offset, line.text) for line in r.lines]
            if r.final_state:
                f.final_state = r.final_state
                return
    finally:
        await channel.close(None)


async def until(check: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def received(followers: list[Follower], n: int) -> None:
    """Until every follower has `n` lines."""
    await until(lambda: all(len(f.lines) >= n for f in followers))


def numbered(texts: list[str], first: int = 0) -> list[tuple[int, int, str]]:
    return [(1, first + i, t) for i, t in enumerate(texts)]


async def test_followers_get_every_line_once_in_order_from_memory(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path) as c:
        run = await running_job(c.app)
        tails = c.app.ctx.log_tails
        followers = [Follower() for _ in range(20)]
        tasks = [asyncio.ensure_future(follow(c, c.address, run.job_id, f)) for f in followers]
        sent: list[str] = []
        await report(c.address, run, "first")  # the followers read it from the ledger (no cursor yet)
        sent.append("first")
        await received(followers, 1)
        served_before = tails.served
        for i in range(30):
            batch = [f"line {i}.{k}" for k in range(1 + i % 3)]
            await report(c.address, run, *batch)
            sent += batch
            if i % 5 == 0:  # now and then every follower waits again before the next batch
                await received(followers, len(sent))
        await received(followers, len(sent))
        assert tails.served > served_before, "the followers were not served from memory"
        assert tails.held(run.job_id) == len(sent)
        await report(c.address, run, "last words", exit_code=0)
        sent.append("last words")
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
        for f in followers:
            assert f.lines == numbered(sent)  # each line once, in order, with its offset
            assert f.final_state == st.JOB_STATE_SUCCEEDED
        assert tails.held(run.job_id) == 0 and len(tails) == 0  # an ended job leaves memory


async def test_a_follower_behind_the_tail_reads_the_ledger_then_continues(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path) as c:
        run = await running_job(c.app)
        tails = c.app.ctx.log_tails
        tails.max_lines = 5  # memory keeps the last 5 lines of the job
        sent = [f"old {i}" for i in range(12)]
        for text in sent:
            await report(c.address, run, text)
        assert tails.held(run.job_id) == 5
        assert tails.after(run.job_id, (1, 3)) is None  # behind what memory holds
        behind, tailing, current = Follower(), Follower(), Follower()
        tasks = [
            asyncio.ensure_future(follow(c, c.address, run.job_id, behind, after_attempt_number=1, after_offset=3)),
            asyncio.ensure_future(follow(c, c.address, run.job_id, tailing, tail_lines=2)),
            asyncio.ensure_future(follow(c, c.address, run.job_id, current, after_attempt_number=1, after_offset=11)),
        ]
        await until(lambda: len(behind.lines) == 8 and len(tailing.lines) == 2)
        served_before = tails.served
        more = [f"new {i}" for i in range(10)]
        for text in more:
            await report(c.address, run, text)
        sent += more
        await until(lambda: len(behind.lines) == 18 and len(tailing.lines) == 12 and len(current.lines) == 10)
        assert tails.served > served_before
        await report(c.address, run, exit_code=0)
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
        assert behind.lines == numbered(sent[4:], 4)
        assert tailing.lines == numbered(sent[10:], 10)
        assert current.lines == numbered(sent[12:], 12)


@pytest.mark.parametrize("ledger", ["postgres"], indirect=True)
async def test_lines_another_replica_stores_reach_followers_of_this_one(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # lines stored by the other replica are found by the ledger heads' periodic read: a short
    # period, so that the test waits on it for less than its default 5 s at each step
    monkeypatch.setattr(jobs_api, "LEDGER_CHECK_SECONDS", 0.2)
    url = create_pg_database()
    try:
        async with console(tmp_path, database_url=url) as c:
            twin_cfg = dataclasses.replace(c.app.ctx.cfg, state_dir=tmp_path / "replica-b", listen="127.0.0.1:0")
            twin = await start_control(twin_cfg)
            try:
                run = await running_job(c.app)
                here, there = Follower(), Follower()
                tasks = [
                    asyncio.ensure_future(follow(c, c.address, run.job_id, here)),
                    asyncio.ensure_future(follow(c, twin.address, run.job_id, there)),
                ]
                sent: list[str] = []
                # the capsule's stream moves between the replicas (reconnects), in runs of batches
                for i in range(24):
                    address = c.address if (i // 3) % 2 == 0 else twin.address
                    batch = [f"line {i}.{k}" for k in range(1 + i % 2)]
                    await report(address, run, *batch)
                    sent += batch
                    if i % 4 == 0:
                        await received([here, there], len(sent))
                await received([here, there], len(sent))
                assert c.app.ctx.log_tails.served > 0 and twin.ctx.log_tails.served > 0
                await report(c.address, run, "end", exit_code=0)
                sent.append("end")
                await asyncio.wait_for(asyncio.gather(*tasks), 60)
                assert here.lines == numbered(sent)
                assert there.lines == numbered(sent)
            finally:
                with contextlib.suppress(Exception):
                    await twin.stop(0)
    finally:
        drop_pg_database(url)


async def test_followers_served_from_memory_read_no_lines_while_nothing_is_stored(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What another replica may have stored is checked for every followed job at once (the ledger
    heads), not by a read of lines per job and period: idle followers read no lines at all."""
    monkeypatch.setattr(jobs_api, "LEDGER_CHECK_SECONDS", 0.2)
    async with console(tmp_path) as c:
        runs = [await running_job(c.app) for _ in range(10)]
        followers = [Follower() for _ in range(30)]
        tasks = [asyncio.ensure_future(follow(c, c.address, runs[i % 10].job_id, f)) for i, f in enumerate(followers)]
        for run in runs:
            await report(c.address, run, "first")
        await received(followers, 1)
        for run in runs:  # the followers now take these from memory
            await report(c.address, run, "second")
        await received(followers, 2)
        engine = c.app.ctx.db.engine
        statements: list[str] = []

        def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            statements.append(statement)

        event.listen(engine, "before_cursor_execute", count)
        try:
            await asyncio.sleep(2.0)  # ten periods
        finally:
            event.remove(engine, "before_cursor_execute", count)
        assert not [s for s in statements if "FROM log_lines" in s], "followers read lines while none were stored"
        head_reads = [s for s in statements if "FROM ingest_cursors" in s]
        assert 5 <= len(head_reads) <= 12, f"{len(head_reads)} head reads in ten periods (one per period wanted)"
        for run in runs:
            await report(c.address, run, "last", exit_code=0)
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
        for i, f in enumerate(followers):
            assert [t for _, _, t in f.lines] == ["first", "second", "last"], i


async def test_a_state_another_replica_sets_ends_the_followers_served_from_memory(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No notification reaches this console (the job is changed in the ledger alone, as another
    replica would): the ledger heads show the new state and the followers read the ledger and end."""
    monkeypatch.setattr(jobs_api, "LEDGER_CHECK_SECONDS", 0.2)
    async with console(tmp_path) as c:
        run = await running_job(c.app)
        followers = [Follower() for _ in range(5)]
        tasks = [asyncio.ensure_future(follow(c, c.address, run.job_id, f)) for f in followers]
        await report(c.address, run, "first")
        await report(c.address, run, "second")
        await received(followers, 2)

        def finish(s: Session) -> None:
            s.get_one(m.Job, run.job_id).state = sm.SUCCEEDED
            s.get_one(m.Attempt, run.attempt_id).state = sm.SUCCEEDED

        await c.app.ctx.db.run(finish)
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
        for f in followers:
            assert f.final_state == st.JOB_STATE_SUCCEEDED
            assert [t for _, _, t in f.lines] == ["first", "second"]


async def test_a_stop_another_replica_asks_reaches_the_run_on_its_open_stream(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stop is written to the ledger alone (no notification here): the signals read for all
    the Report streams of this console every period bring it to the run's open stream."""
    monkeypatch.setattr(ingest_service, "SIGNAL_POLL_SECONDS", 0.2)
    async with console(tmp_path) as c:
        runs = [await running_job(c.app) for _ in range(3)]
        done = asyncio.Event()
        got: dict[str, list[int]] = {r.attempt_id: [] for r in runs}

        async def stream(run: Run) -> None:
            async def requests() -> AsyncIterator[pb.ReportRequest]:
                req = pb.ReportRequest(attempt_id=run.attempt_id)
                rec = req.records.add(seq=1)
                rec.time.GetCurrentTime()
                rec.log_chunk.stream = telemetry_pb2.LOG_STREAM_STDOUT
                rec.log_chunk.lines.append("hello")
                yield req
                await done.wait()

            channel = aio_channel(c.address)
            try:
                call = pb_grpc.IngestServiceStub(channel).Report(requests(), metadata=bearer(run.token))
                async for r in call:
                    got[run.attempt_id].append(r.signal)
                    if r.signal:
                        call.cancel()
                        return
            except asyncio.CancelledError:
                pass
            finally:
                await channel.close(None)

        tasks = [asyncio.ensure_future(stream(r)) for r in runs]
        await until(lambda: all(got.values()))  # each stream's batch acked, no signal
        stopped = runs[1]

        def ask_stop(s: Session) -> None:
            s.get_one(m.Job, stopped.job_id).desired = sm.STOP

        await c.app.ctx.db.run(ask_stop)
        await until(lambda: pb.CONTROL_SIGNAL_STOP in got[stopped.attempt_id], timeout=30)
        await asyncio.sleep(0.5)  # a few more periods: the others get nothing
        assert [g for a, g in got.items() if a != stopped.attempt_id] == [[0], [0]]
        done.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_another_users_follow_is_refused_like_a_missing_job_once_the_owner_is_known(
    tmp_path: pathlib.Path,
) -> None:
    """The owners of followed jobs are kept in memory: a user who is not the owner (nor an admin)
    is refused with the same NotFound as for a job that does not exist, before and after the
    owner's own followers made the console remember the job's owner."""
    async with console(tmp_path) as c:
        run = await running_job(c.app)
        mine = Follower()
        task = asyncio.ensure_future(follow(c, c.address, run.job_id, mine))
        await report(c.address, run, "secret line")
        await received([mine], 1)  # the owner is known now
        assert c.app.ctx.log_tails.held(run.job_id) == 1

        def make_bob(s: Session) -> str:
            auth.create_user(s, "bob")
            return auth.issue_token(s, "bob", "pat", name="t")[0]

        bob = await c.app.ctx.db.run(make_bob)
        channel = aio_channel(c.address)
        try:
            stub = ctl_grpc.ControlServiceStub(channel)
            for job_id in (run.job_id, ids.new_job_id()):
                req = ctl.StreamJobLogsRequest(job_id=job_id, follow=True, tail_lines=10)
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await anext(aiter(stub.StreamJobLogs(req, metadata=bearer(bob))))
                assert refused.value.code() == grpc.StatusCode.NOT_FOUND
                assert refused.value.details() == f"job {job_id} not found"
        finally:
            await channel.close(None)
        await report(c.address, run, "end", exit_code=0)
        await asyncio.wait_for(task, 60)
        assert [t for _, _, t in mine.lines] == ["secret line", "end"]
