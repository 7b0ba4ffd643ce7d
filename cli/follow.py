"""Following a job's logs and transitions across console restarts.

StreamJobLogs and WatchJob are long server streams. When the console goes away mid-stream
(restart, upgrade, network blip) the follower reconnects with backoff and resumes after the
last line (by (attempt_number, offset)) or event (by sequence) it printed, so a restart loses
nothing and prints nothing twice: the requests carry that cursor (after_attempt_number /
after_offset, after_sequence), and anything at or before it is skipped again just in case.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from starforge_api.control.v1 import control_service_pb2
from starforge_api.job.v1 import job_pb2, job_state_pb2, telemetry_pb2

from cli.errors import EXIT_UNREACHABLE, CliError
from cli.output import Output, message_to_dict, ts_to_datetime

if TYPE_CHECKING:  # grpc: imported by the streams that follow; `sf job status` reads without it
    import grpc

    from cli.client import Client
    from cli.fastclient import ReadClient

TERMINAL = frozenset(
    {job_state_pb2.JOB_STATE_SUCCEEDED, job_state_pb2.JOB_STATE_FAILED, job_state_pb2.JOB_STATE_STOPPED}
)
# a stream that ended quietly while the job is in one of these states is over (PAUSED waits for a
# `sf job resume`, which may never come)
STREAM_END = TERMINAL | {job_state_pb2.JOB_STATE_PAUSED}
_TRANSPORT_HINTS = ("RST_STREAM", "Stream removed", "Socket closed", "Connection reset", "GOAWAY")


def state_name(state: int) -> str:
    return job_state_pb2.JobState.Name(state).removeprefix("JOB_STATE_")


def _reconnectable(err: grpc.RpcError) -> bool:
    """Whether a broken stream is worth resuming (transport trouble, not a refusal)."""
    import grpc

    code = err.code()
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
        return True
    details = err.details() or ""
    return code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN) and any(h in details for h in _TRANSPORT_HINTS)


@dataclass
class Backoff:
    """Exponential backoff with a cap on how long one outage may last."""

    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    initial: float = 0.5
    ceiling: float = 5.0
    max_outage_s: float = 300.0
    _delay: float = field(default=0.0, init=False)
    _since: float | None = field(default=None, init=False)

    def ok(self) -> None:
        self._delay = 0.0
        self._since = None

    def failed(self, out: Output, error: CliError) -> None:
        """Wait before the next try; raise `error` when the outage lasts too long."""
        now = self.clock()
        if self._since is None:
            self._since = now
            from rich.text import Text

            out.info(Text("connection to the console lost; reconnecting…", style="yellow"))
        elif now - self._since > self.max_outage_s:
            raise error
        self._delay = min(self.ceiling, self._delay * 2 if self._delay else self.initial)
        self.sleep(self._delay)


def resolve_job_id(client: Client | ReadClient, job_id: str) -> job_pb2.Job:
    """The job for an id or "latest" (so reconnects stay on the same job)."""
    resp = client.call(client.control.GetJob, control_service_pb2.GetJobRequest(job_id=job_id or "latest"))
    job: job_pb2.Job = resp.job
    return job


class LogPrinter:
    """Prints log lines raw on stdout (stderr-stream lines dimmed on a terminal) or as JSON Lines."""

    def __init__(self, out: Output) -> None:
        self.out = out
        self.tty = out.stdout_tty and not out.json
        self.attempt: int | None = None

    def __call__(self, line: telemetry_pb2.LogLine) -> None:
        if self.out.json:
            self.out.json_line(message_to_dict(line))
            return
        from rich.text import Text  # not at the top: JSON output never needs rich

        if self.tty and self.attempt is not None and line.attempt_number != self.attempt:
            self.out.info(Text(f"── attempt {line.attempt_number} ──", style="dim"))
        self.attempt = line.attempt_number
        if self.tty and line.stream in (telemetry_pb2.LOG_STREAM_STDERR, telemetry_pb2.LOG_STREAM_SYSTEM):
            self.out.out.print(Text(line.text, style="dim"), soft_wrap=True)
        else:
            sys.stdout.write(line.text + "\n")

    def flush(self) -> None:
        sys.stdout.flush()


def follow_logs(
    client: Client,
    job_id: str,
    out: Output,
    *,
    tail: int,
    follow: bool,
    backoff: Backoff | None = None,
    printer: Callable[[telemetry_pb2.LogLine], None] | None = None,
) -> int | None:
    """Print the job's log; with `follow`, until it ends. Returns the final JobState when known."""
    import grpc

    backoff = backoff or Backoff()
    emit = printer or LogPrinter(out)
    last: tuple[int, int] | None = None
    request = control_service_pb2.StreamJobLogsRequest(job_id=job_id, tail_lines=tail, follow=follow)
    while True:
        call = client.stream(client.control.StreamJobLogs, request)
        try:
            for resp in call:
                backoff.ok()
                for line in resp.lines:
                    key = (line.attempt_number, line.offset)
                    if last is not None and key <= last:
                        continue
                    last = key
                    emit(line)
                if isinstance(emit, LogPrinter):
                    emit.flush()
                if resp.final_state != job_state_pb2.JOB_STATE_UNSPECIFIED:
                    final: int = resp.final_state
                    return final
            if not follow:
                return None
            state = _state_if_reachable(client, job_id)
            if state is not None and state in STREAM_END:
                return state
            if state is None:
                backoff.failed(out, CliError("the console went away while following logs", EXIT_UNREACHABLE))
            else:
                backoff.sleep(1.0)  # the console ended the stream early (graceful restart): resume
        except grpc.RpcError as err:
            error = client.error(err)
            if not follow or not _reconnectable(err):
                raise error from None
            backoff.failed(out, error)
        except KeyboardInterrupt:
            call.cancel()
            raise
        # resume right after the last line printed (or with the original tail if nothing was)
        request = control_service_pb2.StreamJobLogsRequest(job_id=job_id, tail_lines=tail, follow=True)
        if last is not None:
            request.after_attempt_number, request.after_offset = last


def _state_if_reachable(client: Client, job_id: str) -> int | None:
    try:
        state: int = resolve_job_id(client, job_id).state
        return state
    except CliError as err:
        if err.exit_code == EXIT_UNREACHABLE or err.code in ("UNAVAILABLE", "CANCELLED"):
            return None
        raise


def print_event(out: Output, event: job_pb2.JobEvent) -> None:
    """One transition: time, FROM → TO, reason."""
    if out.json:
        out.json_line(message_to_dict(event))
        return
    when = ts_to_datetime(event.time)
    stamp = when.astimezone().strftime("%H:%M:%S") if when else "--:--:--"
    from rich.text import Text

    text = Text.assemble(
        (stamp, "dim"),
        "  ",
        state_name(event.from_state) if event.from_state else "·",
        " → ",
        (state_name(event.to_state), state_style(event.to_state)),
    )
    if event.attempt_id:
        text.append(f"  [{event.attempt_id}]", style="dim")
    if event.reason:
        text.append(f"  {event.reason}")
    out.out.print(text, soft_wrap=True)


def watch_job(client: Client, job_id: str, out: Output, *, backoff: Backoff | None = None) -> int | None:
    """Print transitions until the job ends; returns its final state (None if the stream just ended)."""
    import grpc

    backoff = backoff or Backoff()
    last_seq = -1
    final: int | None = None
    while True:
        call = client.stream(
            client.control.WatchJob,
            control_service_pb2.WatchJobRequest(job_id=job_id, after_sequence=max(last_seq, 0)),
        )
        try:
            for resp in call:
                backoff.ok()
                final = resp.job.state
                if resp.event.sequence <= last_seq and last_seq >= 0:
                    continue
                last_seq = resp.event.sequence
                print_event(out, resp.event)
            if final is not None and final in STREAM_END:
                return final
            state = _state_if_reachable(client, job_id)
            if state is not None and state in STREAM_END:
                return state
            if state is None:
                backoff.failed(out, CliError("the console went away while watching the job", EXIT_UNREACHABLE))
            else:
                backoff.sleep(1.0)
        except grpc.RpcError as err:
            error = client.error(err)
            if not _reconnectable(err):
                raise error from None
            backoff.failed(out, error)
        except KeyboardInterrupt:
            call.cancel()
            raise


STATE_STYLES: dict[int, str] = {
    job_state_pb2.JOB_STATE_QUEUED: "yellow",
    job_state_pb2.JOB_STATE_SUBMITTED: "cyan",
    job_state_pb2.JOB_STATE_PENDING: "cyan",
    job_state_pb2.JOB_STATE_RUNNING: "bold blue",
    job_state_pb2.JOB_STATE_SUCCEEDED: "bold green",
    job_state_pb2.JOB_STATE_FAILED: "bold red",
    job_state_pb2.JOB_STATE_STOPPED: "magenta",
    job_state_pb2.JOB_STATE_PAUSED: "dim yellow",
}


def state_style(state: int) -> str:
    return STATE_STYLES.get(state, "")


def exit_code_for(final_state: int | None) -> int:
    """0 when the job SUCCEEDED, 1 when it ended otherwise (None: not followed to the end → 0)."""
    if final_state is None:
        return 0
    return 0 if final_state == job_state_pb2.JOB_STATE_SUCCEEDED else 1
