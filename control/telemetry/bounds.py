"""Size limits on what a job reports: every record costs the control plane bounded work and storage.

Code inside a job is not trusted: a single log line, metrics record or sample could otherwise be
as large as a gRPC message allows, every later read (followers, the diagnosis) would pay for it,
and a chatty job could fill the database. Nothing here refuses a record: the capsule resends a
refused record forever, so a record over a limit is stored cut (or its excess dropped) with a
visible `starforge:` line saying what was lost. Below the limits everything is stored as sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from starforge_api.ingest.v1 import ingest_service_pb2 as pb
from starforge_api.job.v1 import job_state_pb2 as st
from starforge_api.job.v1 import lifecycle_event_pb2 as lc
from starforge_api.job.v1 import telemetry_pb2

from control.config import ControlConfig

# The metric name columns' width (metric_chunks, metric_points): a longer name would fail the whole batch on PostgreSQL.
MAX_METRIC_NAME_CHARS = 200
MAX_SAMPLE_EXTRA_ENTRIES = 64


@dataclass(frozen=True)
class IngestLimits:
    max_line_bytes: int = 16384
    log_quota_bytes: int = 1 << 30
    max_points_per_record: int = 1000
    max_samples_per_record: int = 100
    max_sample_field_bytes: int = 65536

    @classmethod
    def of(cls, cfg: ControlConfig) -> IngestLimits:
        return cls(
            max_line_bytes=cfg.max_log_line_bytes,
            log_quota_bytes=cfg.log_quota_bytes_per_job,
            max_points_per_record=cfg.max_metric_points_per_record,
            max_samples_per_record=cfg.max_samples_per_record,
            max_sample_field_bytes=cfg.max_sample_field_bytes,
        )


def _cut_utf8(text: str, max_bytes: int) -> tuple[str, int]:
    """`text` cut to at most `max_bytes` UTF-8 bytes (never inside a character), and the bytes dropped."""
    if len(text) * 4 <= max_bytes:  # no UTF-8 encoding can be longer than 4 bytes per character
        return text, 0
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= max_bytes:
        return text, 0
    kept = data[:max_bytes].decode("utf-8", "ignore")
    return kept, len(data) - len(kept.encode("utf-8", "surrogatepass"))


def cut_line(line: str, max_bytes: int) -> str:
    """One log line of at most `max_bytes` bytes of what was printed, then a marker if it was cut."""
    kept, dropped = _cut_utf8(line, max_bytes)
    return kept if not dropped else f"{kept}… [starforge: line cut, {dropped} bytes dropped]"


def line_bytes(line: str) -> int:
    return len(line.encode("utf-8", "surrogatepass"))


@dataclass
class LogBudget:
    """The log bytes a job may still store; lines past its quota are counted, not stored."""

    quota: int
    used: int
    dropped: int = 0
    marked: bool = False  # the one "quota reached" line was already stored for this job
    dropped_now: int = 0

    def admit(self, nbytes: int) -> bool:
        if self.dropped == 0 and self.used + nbytes <= self.quota:
            self.used += nbytes
            return True
        # once a line was dropped, later (even short) lines are dropped too: the log stays a
        # prefix of what the job printed, never a log with holes in it
        self.dropped += nbytes
        self.dropped_now += nbytes
        return False

    def marker(self) -> str | None:
        """The one line that says the quota was reached, the first time lines are dropped."""
        if self.marked or not self.dropped:
            return None
        self.marked = True
        return (
            f"starforge: this job's log reached its quota of {self.quota} bytes; later lines are not "
            "stored (the job counts the bytes dropped)"
        )


def bound_points(
    points: Sequence[telemetry_pb2.MetricPoint], limits: IngestLimits
) -> tuple[list[telemetry_pb2.MetricPoint], list[str]]:
    """The points of one record that may be stored, and the lines that say what was dropped."""
    if len(points) <= limits.max_points_per_record and all(len(p.name) <= MAX_METRIC_NAME_CHARS for p in points):
        return list(points), []  # the usual record: nothing to drop, one pass
    notes: list[str] = []
    kept = list(points[: limits.max_points_per_record])
    if len(points) > limits.max_points_per_record:
        notes.append(
            f"starforge: a metrics record carried {len(points)} values; the first "
            f"{limits.max_points_per_record} were stored, the rest dropped"
        )
    long_names = [p for p in kept if len(p.name) > MAX_METRIC_NAME_CHARS]
    if long_names:
        kept = [p for p in kept if len(p.name) <= MAX_METRIC_NAME_CHARS]
        notes.append(
            f"starforge: {len(long_names)} metric value(s) dropped: metric names are at most "
            f"{MAX_METRIC_NAME_CHARS} characters (one began {long_names[0].name[:40]!r})"
        )
    return kept, notes


def bound_samples(
    samples: Sequence[telemetry_pb2.Sample], limits: IngestLimits
) -> tuple[list[telemetry_pb2.Sample], list[str]]:
    """The samples of one record, each text cut to the limit, and the lines that say what was cut."""
    notes: list[str] = []
    if len(samples) > limits.max_samples_per_record:
        notes.append(
            f"starforge: a samples record carried {len(samples)} samples; the first "
            f"{limits.max_samples_per_record} were stored, the rest dropped"
        )
    out: list[telemetry_pb2.Sample] = []
    cut = 0
    for sample in samples[: limits.max_samples_per_record]:
        bounded, was_cut = _bound_sample(sample, limits.max_sample_field_bytes)
        out.append(bounded)
        cut += was_cut
    if cut:
        notes.append(
            f"starforge: {cut} sample(s) cut: prompt, completion and each extra value are at most "
            f"{limits.max_sample_field_bytes} bytes, at most {MAX_SAMPLE_EXTRA_ENTRIES} extra fields"
        )
    return out, notes


def _bound_sample(sample: telemetry_pb2.Sample, max_bytes: int) -> tuple[telemetry_pb2.Sample, bool]:
    prompt, p_cut = _cut_utf8(sample.prompt, max_bytes)
    completion, c_cut = _cut_utf8(sample.completion, max_bytes)
    items = sorted(sample.extra.items())
    extra: dict[str, str] = {}
    cut = bool(p_cut or c_cut) or len(items) > MAX_SAMPLE_EXTRA_ENTRIES
    for key, value in items[:MAX_SAMPLE_EXTRA_ENTRIES]:
        k, k_cut = _cut_utf8(key, 256)
        v, v_cut = _cut_utf8(value, max_bytes)
        cut = cut or bool(k_cut or v_cut)
        extra[k] = v
    if not cut:
        return sample, False
    out = telemetry_pb2.Sample(step=sample.step, prompt=prompt, completion=completion, extra=extra)
    if sample.HasField("reward"):
        out.reward = sample.reward
    return out, True


def is_ending(rec: pb.Record) -> bool:
    """A lifecycle record that ends the attempt (its diagnosis reads the log tail)."""
    if rec.WhichOneof("body") != "lifecycle":
        return False
    return rec.lifecycle.phase in (lc.LIFECYCLE_PHASE_COMMAND_EXITED, lc.LIFECYCLE_PHASE_RUNNER_FAILED)


def clean_exit(ev: lc.LifecycleEvent) -> bool:
    """The training command exited 0, not by a signal, and the capsule named no failure class of
    its own (USER_CODE is its default for any exit and says nothing here): the attempt succeeds, or
    ends as its job asked (paused, stopped). No diagnosis runs, so its log tail is not read."""
    return (
        ev.phase == lc.LIFECYCLE_PHASE_COMMAND_EXITED
        and ev.HasField("exit_code")
        and ev.exit_code == 0
        and not ev.signal
        and ev.failure_class in (st.FAILURE_CLASS_UNSPECIFIED, st.FAILURE_CLASS_USER_CODE)
    )


def needs_diagnosis(rec: pb.Record) -> bool:
    """A record that ends the attempt in a way its diagnosis may explain from the log tail."""
    return is_ending(rec) and not clean_exit(rec.lifecycle)
