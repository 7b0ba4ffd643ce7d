"""Pure rules of the input bounds: line cutting, the log budget, record trimming, the rate limiter."""

from __future__ import annotations

import pytest
from starforge_api.control.v1 import error_reason_pb2 as er
from starforge_api.ingest.v1 import ingest_service_pb2 as ingest_pb
from starforge_api.job.v1 import lifecycle_event_pb2 as lc
from starforge_api.job.v1 import telemetry_pb2

from common import errors
from common.config import ConfigError
from control import rate_limit, stream_limit
from control.auth import Principal
from control.config import ControlConfig
from control.telemetry import bounds


def test_a_line_within_the_limit_is_kept_as_printed() -> None:
    assert bounds.cut_line("x" * 256, 256) == "x" * 256
    assert bounds.cut_line("é" * 128, 256) == "é" * 128  # 256 bytes exactly


def test_a_long_line_is_cut_at_a_character_boundary_with_the_bytes_dropped() -> None:
    line = "€" * 100  # 3 bytes each: 300 bytes
    cut = bounds.cut_line(line, 256)
    kept, _, marker = cut.partition("…")
    assert kept == "€" * 85  # 255 bytes: the 86th character would straddle the limit
    assert marker == " [starforge: line cut, 45 bytes dropped]"


def test_the_log_budget_keeps_a_prefix_and_marks_once() -> None:
    b = bounds.LogBudget(quota=10, used=0)
    assert [b.admit(n) for n in (4, 4, 4, 1)] == [True, True, False, False]
    assert (b.used, b.dropped) == (8, 5)
    assert b.marker() is not None
    assert b.marker() is None
    again = bounds.LogBudget(quota=10, used=8, dropped=5, marked=True)
    assert not again.admit(1)
    assert again.marker() is None


def test_oversized_metric_and_sample_records_are_trimmed_with_a_note() -> None:
    limits = bounds.IngestLimits(max_points_per_record=2, max_samples_per_record=1, max_sample_field_bytes=8)
    points = [telemetry_pb2.MetricPoint(step=1, name=n, value=1.0) for n in ("a", "b", "c")]
    kept, notes = bounds.bound_points(points, limits)
    assert [p.name for p in kept] == ["a", "b"] and len(notes) == 1
    long = [telemetry_pb2.MetricPoint(step=1, name="n" * 201, value=1.0)]
    kept, notes = bounds.bound_points(long, limits)
    assert kept == [] and "at most 200 characters" in notes[0]
    samples = [telemetry_pb2.Sample(step=1, prompt="p" * 20, completion="ok", reward=0.5), telemetry_pb2.Sample()]
    out, notes = bounds.bound_samples(samples, limits)
    assert len(out) == 1 and out[0].prompt == "p" * 8 and out[0].completion == "ok" and out[0].reward == 0.5
    assert len(notes) == 2


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_rate_limiter_allows_a_burst_then_the_rate_per_user() -> None:
    clock = Clock()
    limiter = rate_limit.SubmitRateLimiter(rate=2.0, burst=3, clock=clock)
    alice = Principal(user="alice", admin=False, kind="pat", token_id="t1")
    bob = Principal(user="bob", admin=False, kind="pat", token_id="t2")
    root = Principal(user="root", admin=True, kind="pat", token_id="t3")
    for _ in range(3):
        limiter.check(alice)
    with pytest.raises(errors.ResourceExhausted) as e:
        limiter.check(alice)
    assert e.value.reason == er.ERROR_REASON_SUBMIT_RATE_LIMITED
    assert e.value.retry_after_seconds == 0.5
    assert e.value.message.endswith("at most 2 submissions per second (bursts of 3); retry in 0.5 s")
    limiter.check(bob)  # another user's bucket is full
    for _ in range(10):
        limiter.check(root)  # admins are exempt
    clock.now += 0.5
    limiter.check(alice)
    unlimited = rate_limit.SubmitRateLimiter(rate=0, burst=1, clock=clock)
    for _ in range(100):
        unlimited.check(alice)


def test_a_full_http_pending_set_evicts_its_oldest_connection() -> None:
    import socket
    import threading
    import urllib.request

    from control.http_limits import BoundedHandler, BoundedHTTPServer, HttpLimits

    class Ok(BoundedHandler):
        def log_message(self, fmt: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "3")
            self.end_headers()
            self.wfile.write(b"ok\n")

    server = BoundedHTTPServer(("127.0.0.1", 0), Ok, HttpLimits(max_pending=4, header_timeout=60))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    try:
        half_open = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=30) as r:
            assert r.read() == b"ok\n"
        oldest = half_open[0]
        oldest.settimeout(30)
        assert oldest.recv(100).startswith(b"HTTP/1.0 503")
        for s in half_open:
            s.close()
    finally:
        server.shutdown()
        server.server_close()


def test_the_stream_limit_counts_users_personal_streams_and_frees_each_once() -> None:
    limiter = stream_limit.StreamLimiter(2)
    alice = Principal("alice", admin=False, kind="pat", token_id="t")
    first, second = limiter.acquire(alice), limiter.acquire(alice)
    assert first is not None and second is not None and limiter.open_streams("alice") == 2
    with pytest.raises(errors.ResourceExhausted) as e:
        limiter.acquire(alice)
    assert e.value.reason == er.ERROR_REASON_STREAM_LIMITED
    assert [(q.subject, q.description) for q in e.value.quota_violations] == [
        ("user:alice", "at most 2 log and watch streams open at once")
    ]
    first()
    first()  # a second call of one release frees nothing more
    assert limiter.open_streams("alice") == 1
    assert limiter.acquire(Principal("bob", admin=False, kind="pat", token_id="u")) is not None
    # not counted: admins, a job's run token, and any caller when the limit is 0
    assert limiter.acquire(Principal("root", admin=True, kind="pat", token_id="v")) is None
    assert limiter.acquire(Principal("alice", admin=False, kind="run", token_id="w", job_id="j")) is None
    assert stream_limit.StreamLimiter(0).acquire(alice) is None
    second()
    assert limiter.open_streams("alice") == 0


def test_a_negative_stream_limit_is_refused_at_start() -> None:
    with pytest.raises(ConfigError, match="streams_per_user must not be negative"):
        ControlConfig(streams_per_user=-1).validate()


@pytest.mark.parametrize(
    ("event", "clean"),
    [
        (dict(phase="COMMAND_EXITED", exit_code=0), True),
        (dict(phase="COMMAND_EXITED", exit_code=0, failure_class="USER_CODE"), True),  # the capsule's default
        (dict(phase="COMMAND_EXITED", exit_code=1), False),
        (dict(phase="COMMAND_EXITED", exit_code=0, signal=9), False),
        (dict(phase="COMMAND_EXITED", exit_code=0, failure_class="OUT_OF_MEMORY"), False),  # the capsule's own verdict
        (dict(phase="COMMAND_EXITED"), False),  # no exit code at all
        (dict(phase="RUNNER_FAILED", exit_code=0), False),
        (dict(phase="COMMAND_STARTED"), False),
    ],
)
def test_only_a_clean_exit_skips_the_diagnosis_and_its_log_read(event: dict[str, object], clean: bool) -> None:
    # what outcomes.finish_attempt turns into SUCCEEDED without diagnosing: exit code 0, no signal,
    # no failure class but USER_CODE; every other ending record has its log tail read first
    ev = lc.LifecycleEvent(
        phase=f"LIFECYCLE_PHASE_{event['phase']}",
        signal=int(str(event.get("signal", 0))),
        failure_class=f"FAILURE_CLASS_{event.get('failure_class', 'UNSPECIFIED')}",
    )
    if "exit_code" in event:
        ev.exit_code = int(str(event["exit_code"]))
    assert bounds.clean_exit(ev) is clean
    rec = ingest_pb.Record(seq=1, lifecycle=ev)
    ending = ev.phase in (lc.LIFECYCLE_PHASE_COMMAND_EXITED, lc.LIFECYCLE_PHASE_RUNNER_FAILED)
    assert bounds.needs_diagnosis(rec) is (ending and not clean)
