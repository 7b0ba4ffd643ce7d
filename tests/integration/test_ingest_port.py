"""IngestService on a port of its own (`ingest_listen`, control/ingest_port.py): a thread-pool gRPC
server whose handlers hand each batch to the console's loop.

A real job reports there (its LaunchRequest names that port); lines reported there reach the
followers of the main port once each and in order; a stop reaches the open stream at once; every
refusal is the one the main port gives (same code, message and reason); the port serves nothing
else; a stream beyond `ingest_max_streams` is refused and a stream the client leaves ends on the
console too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
import socket
import threading
from collections.abc import AsyncIterator

import grpc
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.control.v1 import control_service_pb2_grpc as ctl_grpc
from starforge_api.executor.v1 import launch_request_pb2 as lr
from starforge_api.ingest.v1 import ingest_service_pb2 as pb
from starforge_api.ingest.v1 import ingest_service_pb2_grpc as pb_grpc
from starforge_api.job.v1 import job_state_pb2 as st
from starforge_api.job.v1 import telemetry_pb2

from common.channel import aio_channel, bearer
from common.config import ConfigError
from common.rpc_status import from_rpc_error
from control import metrics
from control.config import ControlConfig, FleetConfig
from control.db import models as m
from control.ingest_port import IngestPort
from tests.integration.console import Console, console
from tests.integration.test_log_followers import Follower, Run, follow, numbered, received, report, running_job, until

pytestmark = pytest.mark.usefixtures("ledger")

OWN_PORT = "127.0.0.1:0"  # ingest_listen: a free port of its own


def ingest_address(c: Console) -> str:
    address = c.app.ctx.public_ingest_address
    assert address != c.address  # the port of its own, not the main one
    return address


def batch(run: Run, *lines: str) -> pb.ReportRequest:
    run.seq += 1
    req = pb.ReportRequest(attempt_id=run.attempt_id)
    rec = req.records.add(seq=run.seq)
    rec.time.GetCurrentTime()
    rec.log_chunk.stream = telemetry_pb2.LOG_STREAM_STDOUT
    rec.log_chunk.lines.extend(lines)
    return req


async def test_a_real_job_reports_to_the_ingest_port(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path, ingest_listen=OWN_PORT) as c:
        job = await c.submit_custom("#!/usr/bin/env bash\nfor i in 1 2 3; do echo line $i; done\n")
        done = await c.wait(job.job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=90)
        lines = await c.logs(job.job_id)
        assert done.state == st.JOB_STATE_SUCCEEDED, (done.diagnosis, lines)
        assert [ln for ln in lines if ln.startswith("line ")] == ["line 1", "line 2", "line 3"]

        def launch(s: Session) -> lr.LaunchRequest:
            data = s.scalars(select(m.Attempt.launch).where(m.Attempt.job_id == job.job_id)).one()
            return lr.LaunchRequest.FromString(data)

        sent = await c.app.ctx.db.run(launch)
        assert sent.ingest.address == ingest_address(c)  # where the capsule reported the lines above
        assert sent.blob_source.address == c.address  # blobs stay on the main port


async def test_lines_reported_there_reach_the_main_ports_followers_once_in_order(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path, ingest_listen=OWN_PORT) as c:
        run = await running_job(c.app)
        followers = [Follower() for _ in range(10)]
        tasks = [asyncio.ensure_future(follow(c, c.address, run.job_id, f)) for f in followers]
        sent: list[str] = []
        for i in range(20):
            batch_lines = [f"line {i}.{k}" for k in range(1 + i % 3)]
            await report(ingest_address(c), run, *batch_lines)
            sent += batch_lines
        await received(followers, len(sent))
        await report(ingest_address(c), run, "last", exit_code=0)
        sent.append("last")
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
        for f in followers:
            assert f.lines == numbered(sent)
            assert f.final_state == st.JOB_STATE_SUCCEEDED


async def test_a_stop_reaches_the_open_stream_at_once(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path, ingest_listen=OWN_PORT) as c:
        run = await running_job(c.app)
        release = asyncio.Event()

        async def requests() -> AsyncIterator[pb.ReportRequest]:
            yield batch(run, "hello")
            await release.wait()

        channel = aio_channel(ingest_address(c))
        try:
            call = pb_grpc.IngestServiceStub(channel).Report(requests(), metadata=bearer(run.token))
            first = await call.read()
            assert (first.acked_seq, first.signal) == (1, pb.CONTROL_SIGNAL_UNSPECIFIED)
            # A stop notifies the stream's watcher, which starts waiting just after the first ack:
            # asked again (the same stop) until one lands while it waits, well before the 5 s poll.
            signalled = asyncio.ensure_future(call.read())
            for _ in range(5):
                await c.jobs.StopJob(ctl.StopJobRequest(job_id=run.job_id), metadata=c.md)
                await asyncio.wait([signalled], timeout=0.5)
                if signalled.done():
                    break
            assert signalled.done(), "no signal within 2.5 s"
            assert signalled.result().signal == pb.CONTROL_SIGNAL_STOP
            release.set()
            call.cancel()
        finally:
            await channel.close(None)


async def _answer(address: str, token: str | None, requests: list[pb.ReportRequest | bytes]) -> grpc.aio.AioRpcError:
    """The error `address` answers a Report stream of `requests` with (raw bytes sent as they are)."""

    async def stream() -> AsyncIterator[bytes]:
        for r in requests:
            yield r if isinstance(r, bytes) else r.SerializeToString()

    channel = aio_channel(address)
    try:
        call = channel.stream_stream(
            "/starforge.ingest.v1.IngestService/Report",
            request_serializer=lambda b: b,
            response_deserializer=pb.ReportResponse.FromString,
        )(stream(), metadata=bearer(token) if token else ())
        try:
            got = [r async for r in call]
        except grpc.aio.AioRpcError as err:
            return err
        raise AssertionError(f"accepted: {got}")
    finally:
        await channel.close(None)


async def test_every_refusal_is_the_main_ports(tmp_path: pathlib.Path) -> None:
    """The same calls against both ports: the same code, message and reason."""
    async with console(tmp_path, ingest_listen=OWN_PORT) as c:
        run, other = await running_job(c.app), await running_job(c.app)
        cases: dict[str, tuple[str | None, list[pb.ReportRequest | bytes]]] = {
            "no token": (None, [pb.ReportRequest(attempt_id=run.attempt_id)]),
            "a wrong token": ("sf_not_a_token", [pb.ReportRequest(attempt_id=run.attempt_id)]),
            "a user's token": (c.token, [pb.ReportRequest(attempt_id=run.attempt_id)]),
            "another attempt": (run.token, [pb.ReportRequest(attempt_id=other.attempt_id)]),
            "no attempt_id": (run.token, [pb.ReportRequest()]),
            "two attempts": (
                run.token,
                [pb.ReportRequest(attempt_id=run.attempt_id), pb.ReportRequest(attempt_id=other.attempt_id)],
            ),
            "bytes that do not parse": (run.token, [b"\xff\xff\xff"]),
            "a skipped seq": (run.token, [pb.ReportRequest(attempt_id=run.attempt_id, records=[{"seq": 5}])]),
        }
        for name, (token, requests) in cases.items():
            own = await _answer(ingest_address(c), token, requests)
            main = await _answer(c.address, token, requests)
            assert own.code() == main.code(), (name, own, main)
            assert own.code() not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL, grpc.StatusCode.OK), name
            assert from_rpc_error(own).reason == from_rpc_error(main).reason, name
            assert own.details() == main.details(), (name, own.details(), main.details())

        async with aio_channel(ingest_address(c)) as channel:
            cursor = await pb_grpc.IngestServiceStub(channel).GetCursor(
                pb.GetCursorRequest(attempt_id=run.attempt_id), metadata=bearer(run.token)
            )
            assert cursor.acked_seq == 0
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await pb_grpc.IngestServiceStub(channel).GetCursor(
                    pb.GetCursorRequest(attempt_id=other.attempt_id), metadata=bearer(run.token)
                )
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_the_port_serves_nothing_but_ingest(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path, ingest_listen=OWN_PORT) as c, aio_channel(ingest_address(c)) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await ctl_grpc.ControlServiceStub(channel).ListJobs(ctl.ListJobsRequest(), metadata=c.md)
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await channel.unary_unary("/grpc.health.v1.Health/Check", lambda b: b, lambda b: b)(b"")
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_streams_beyond_the_limit_are_refused_and_a_left_stream_ends(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path, ingest_max_streams=2, ingest_listen=OWN_PORT) as c:
        runs = [await running_job(c.app) for _ in range(3)]
        release = asyncio.Event()
        channel = aio_channel(ingest_address(c))

        def reading_threads() -> int:
            return sum(1 for t in threading.enumerate() if t.name == "ingest-read")

        def bridged_streams() -> int:
            """Report streams of the port running on the console's loop (`_BridgedStream._run`)."""
            return sum(
                1 for t in asyncio.all_tasks() if getattr(t.get_coro(), "__qualname__", "") == "_BridgedStream._run"
            )

        async def requests(run: Run) -> AsyncIterator[pb.ReportRequest]:
            yield batch(run, "hello")
            await release.wait()

        async def nothing_yet() -> AsyncIterator[pb.ReportRequest]:
            await release.wait()  # refused before it sends: the status, not a failed send
            yield batch(runs[2], "late")

        try:
            stub = pb_grpc.IngestServiceStub(channel)
            calls = [stub.Report(requests(r), metadata=bearer(r.token)) for r in runs[:2]]
            for call in calls:
                assert (await call.read()).acked_seq == 1
            assert reading_threads() == 2 and bridged_streams() == 2
            assert metrics.INGEST_PORT_STREAMS._value.get() == 2  # what /metrics shows
            extra = stub.Report(nothing_yet(), metadata=bearer(runs[2].token))
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await extra.read()
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            calls[0].cancel()  # the client leaves: its thread and its watch end on the console
            await until(lambda: reading_threads() == 1, timeout=15)
            await until(lambda: bridged_streams() == 1, timeout=15)
            await until(lambda: metrics.INGEST_PORT_STREAMS._value.get() == 1, timeout=15)
            again = stub.Report(requests(runs[2]), metadata=bearer(runs[2].token))
            assert (await again.read()).acked_seq == 1
            release.set()
            assert await again.read() is grpc.aio.EOF  # type: ignore[attr-defined]
            assert await again.code() == grpc.StatusCode.OK
        finally:
            await channel.close(None)


def test_the_config_refuses_what_jobs_could_not_reach() -> None:
    remote = [FleetConfig(name="gpu", kind="slurm", address="slurm.example.com:6820")]
    base = ControlConfig(public_address="console.example.com:7070", fleets=remote)
    base.validate_public_address()
    with pytest.raises(ConfigError, match="public_ingest_address"):
        dataclasses.replace(base, ingest_listen="127.0.0.1:7071").validate_public_address()
    dataclasses.replace(
        base, ingest_listen="127.0.0.1:7071", public_ingest_address="console.example.com:7071"
    ).validate_public_address()
    with pytest.raises(ConfigError, match="ingest_max_streams"):
        ControlConfig(ingest_max_streams=0).validate()
    with pytest.raises(ConfigError, match="ingest_listen"):
        ControlConfig(ingest_listen="0.0.0.0:7071").validate_tls()  # plaintext off loopback


def test_a_port_already_taken_is_one_clear_error() -> None:
    """grpc's thread-pool server raises RuntimeError where grpc.aio's answers port 0; the console
    turns both into the OSError `starforge-control` prints as one line (exit 1)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        with pytest.raises(OSError, match=f"cannot listen on {address}: address in use or not available"):
            IngestPort(address, max_streams=1)


async def test_callers_without_a_token_cannot_take_the_runs_stream_slots(tmp_path: pathlib.Path) -> None:
    """The hostile tenant: a job's own code (no run token; it cannot read its runner's) opens
    Report calls on the ingest port as fast as it can, with no token and with a forged one. The
    limit counts authenticated streams only, so a real run still reports every batch."""
    async with console(tmp_path, ingest_max_streams=2, ingest_listen=OWN_PORT) as c:
        run = await running_job(c.app)
        address = ingest_address(c)
        until_t = asyncio.get_running_loop().time() + 4.0
        answers: dict[str, int] = {}

        async def flood(i: int) -> None:
            forged = "sfr_" + "x" * 10 + "_" + "y" * 43
            metadata = bearer(forged) if i % 2 else ()

            async def nothing() -> AsyncIterator[pb.ReportRequest]:
                return  # refused before any message: the status, not a failed send
                yield

            async with aio_channel(address) as channel:
                stub = pb_grpc.IngestServiceStub(channel)
                while asyncio.get_running_loop().time() < until_t:
                    with pytest.raises(grpc.aio.AioRpcError) as err:
                        await stub.Report(nothing(), metadata=metadata).read()
                    answers[err.value.code().name] = answers.get(err.value.code().name, 0) + 1

        attackers = [asyncio.ensure_future(flood(i)) for i in range(100)]
        await asyncio.sleep(0.5)
        for i in range(8):  # every batch of the real run is taken while the flood goes on
            await report(address, run, f"line {i}")
        await asyncio.gather(*attackers)
        assert set(answers) == {"UNAUTHENTICATED"}, answers
        assert sum(answers.values()) > 100, answers  # the flood did run beside the reports
