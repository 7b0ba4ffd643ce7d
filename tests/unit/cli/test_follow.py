"""Following logs and transitions: dedupe across reconnects, exit codes."""

from __future__ import annotations

from typing import Any, cast

import grpc
import pytest
from starforge_api.control.v1 import control_service_pb2 as cs
from starforge_api.job.v1 import job_pb2, job_state_pb2, telemetry_pb2

from cli import follow
from cli.client import Client
from cli.errors import CliError
from cli.output import Output
from tests.unit.cli.fakes import FakeClient, FakeRpcError, FakeStream

SUCCEEDED = job_state_pb2.JOB_STATE_SUCCEEDED
FAILED = job_state_pb2.JOB_STATE_FAILED
RUNNING = job_state_pb2.JOB_STATE_RUNNING


def _lines(attempt: int, offsets: range) -> list[telemetry_pb2.LogLine]:
    return [telemetry_pb2.LogLine(attempt_number=attempt, offset=o, text=f"a{attempt} l{o}") for o in offsets]


def _client(handlers: dict[str, Any]) -> Client:
    return cast(Client, FakeClient(handlers))


def _backoff() -> follow.Backoff:
    return follow.Backoff(sleep=lambda s: None, clock=lambda: 0.0)


def _job(state: int) -> cs.GetJobResponse:
    return cs.GetJobResponse(job=job_pb2.Job(job_id="j1", state=state))  # type: ignore[arg-type]


def test_reconnect_resumes_after_the_last_line_without_duplicates() -> None:
    streams = [
        FakeStream(
            [cs.StreamJobLogsResponse(lines=_lines(1, range(3)))],
            FakeRpcError(grpc.StatusCode.UNAVAILABLE, "Socket closed"),
        ),
        FakeStream(
            [
                cs.StreamJobLogsResponse(lines=_lines(1, range(5))),  # full history again
                cs.StreamJobLogsResponse(lines=_lines(2, range(2))),
                cs.StreamJobLogsResponse(final_state=SUCCEEDED),
            ]
        ),
    ]
    fake = FakeClient({"StreamJobLogs": lambda req: streams.pop(0)})
    printed: list[str] = []
    final = follow.follow_logs(
        cast(Client, fake),
        "j1",
        Output(),
        tail=100,
        follow=True,
        backoff=_backoff(),
        printer=lambda line: printed.append(line.text),
    )
    assert final == SUCCEEDED
    assert printed == ["a1 l0", "a1 l1", "a1 l2", "a1 l3", "a1 l4", "a2 l0", "a2 l1"]
    first, second = fake.requests["StreamJobLogs"]
    assert (first.tail_lines, first.follow) == (100, True)
    # the reconnect asks for the lines after the last one printed
    assert (second.follow, second.job_id, second.after_attempt_number, second.after_offset) == (True, "j1", 1, 2)


def test_stream_ended_without_final_state_checks_the_job() -> None:
    streams = [FakeStream([cs.StreamJobLogsResponse(lines=_lines(1, range(2)))]), FakeStream([])]
    states = [RUNNING, FAILED]
    client = _client({"StreamJobLogs": lambda req: streams.pop(0), "GetJob": lambda req: _job(states.pop(0))})
    final = follow.follow_logs(
        client, "j1", Output(), tail=0, follow=True, backoff=_backoff(), printer=lambda line: None
    )
    assert final == FAILED
    assert follow.exit_code_for(final) == 1


def test_refusals_are_not_retried() -> None:
    from common import errors

    err = FakeRpcError.from_error(errors.NotFound("job j1 not found"))
    client = _client({"StreamJobLogs": lambda req: FakeStream([], err)})
    with pytest.raises(CliError) as info:
        follow.follow_logs(client, "j1", Output(), tail=0, follow=True, backoff=_backoff(), printer=lambda line: None)
    assert info.value.exit_code == 3


def test_outage_gives_up_after_the_limit() -> None:
    now = [0.0]

    def clock() -> float:
        now[0] += 100
        return now[0]

    client = _client(
        {"StreamJobLogs": lambda req: FakeStream([], FakeRpcError(grpc.StatusCode.UNAVAILABLE, "connection refused"))}
    )
    backoff = follow.Backoff(sleep=lambda s: None, clock=clock, max_outage_s=250)
    with pytest.raises(CliError) as info:
        follow.follow_logs(client, "j1", Output(), tail=0, follow=True, backoff=backoff, printer=lambda line: None)
    assert info.value.exit_code == 5


def test_without_follow_one_pass_and_no_reconnect() -> None:
    client = _client({"StreamJobLogs": lambda req: FakeStream([cs.StreamJobLogsResponse(lines=_lines(1, range(2)))])})
    printed: list[Any] = []
    assert follow.follow_logs(client, "j1", Output(), tail=0, follow=False, printer=printed.append) is None
    assert len(printed) == 2


def test_log_printer_writes_raw_lines(capsys: pytest.CaptureFixture[str]) -> None:
    printer = follow.LogPrinter(Output())
    printer(telemetry_pb2.LogLine(text="[bold]not markup[/bold]", stream=telemetry_pb2.LOG_STREAM_STDERR))
    printer(telemetry_pb2.LogLine(text="plain"))
    assert capsys.readouterr().out == "[bold]not markup[/bold]\nplain\n"


def test_watch_dedupes_events_by_sequence(capsys: pytest.CaptureFixture[str]) -> None:
    def event(seq: int, to: int) -> cs.WatchJobResponse:
        return cs.WatchJobResponse(
            event=job_pb2.JobEvent(job_id="j1", sequence=seq, to_state=to),  # type: ignore[arg-type]
            job=job_pb2.Job(job_id="j1", state=to),  # type: ignore[arg-type]
        )

    streams = [
        FakeStream(
            [event(1, job_state_pb2.JOB_STATE_QUEUED), event(2, RUNNING)],
            FakeRpcError(grpc.StatusCode.UNAVAILABLE, "gone"),
        ),
        FakeStream([event(2, RUNNING), event(3, SUCCEEDED)]),
    ]
    client = _client({"WatchJob": lambda req: streams.pop(0)})
    assert follow.watch_job(client, "j1", Output(), backoff=_backoff()) == SUCCEEDED
    out = capsys.readouterr().out
    assert out.count("RUNNING") == 1
    assert "SUCCEEDED" in out


def test_exit_codes() -> None:
    assert follow.exit_code_for(SUCCEEDED) == 0
    assert follow.exit_code_for(job_state_pb2.JOB_STATE_STOPPED) == 1
    assert follow.exit_code_for(None) == 0
