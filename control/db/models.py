"""Tables of the ledger. Times are float seconds since the epoch (same on SQLite and PostgreSQL).

Protobuf messages that are stored whole (spec, provenance, diagnosis) are serialized bytes: the
contract is the schema, and reading them back never needs a migration.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class DesiredColumn(TypeDecorator[int]):
    """jobs.desired: a DesiredState in code, stored in its released string form ("", "stop",
    "pause") so that a replica of the previous release reads and writes the same column during a
    rolling upgrade (expand/contract, docs/deploy.md). Integers read back as themselves
    (a ledger that ran an unreleased draft of migration 0008 stored them)."""

    impl = String(16)
    cache_ok = True

    # DesiredState values (starforge.job.v1.DesiredState), fixed here: the stored form must not
    # change when the contract grows.
    TO_TEXT = {0: "", 1: "stop", 2: "pause"}
    FROM_TEXT = {v: k for k, v in TO_TEXT.items()}

    def process_bind_param(self, value: int | None, dialect: Dialect) -> str | None:
        if value is None:
            return None
        try:
            return self.TO_TEXT[int(value)]
        except KeyError:
            raise ValueError(f"jobs.desired cannot store DesiredState {value}") from None

    def process_result_value(self, value: object, dialect: Dialect) -> int | None:
        if value is None:
            return None
        if isinstance(value, int):
            return value
        text_value = str(value)
        if text_value in self.FROM_TEXT:
            return self.FROM_TEXT[text_value]
        if text_value.isdigit():
            return int(text_value)
        raise ValueError(f"jobs.desired holds {text_value!r}, not a desired state")


NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class User(Base):
    __tablename__ = "users"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[float] = mapped_column(Float)


class Token(Base):
    """A personal access token ('pat'), a run token ('run', scoped to one attempt) or a node token."""

    __tablename__ = "tokens"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    user: Mapped[str] = mapped_column(String(64), index=True)
    name: Mapped[str] = mapped_column(String(200), default="")
    secret_hash: Mapped[str] = mapped_column(String(128))
    kind: Mapped[str] = mapped_column(String(8))
    job_id: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)
    # Run tokens: the one attempt they may report for and read the blobs of.
    attempt_id: Mapped[str | None] = mapped_column(String(40), nullable=True, index=True)
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    last_used_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class Job(Base):
    __tablename__ = "jobs"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    owner: Mapped[str] = mapped_column(String(64))
    project: Mapped[str] = mapped_column(String(200))
    experiment: Mapped[str] = mapped_column(String(200))
    method: Mapped[str] = mapped_column(String(100))
    state: Mapped[int] = mapped_column(Integer)
    queue: Mapped[str] = mapped_column(String(64), default="default")
    priority: Mapped[int] = mapped_column(Integer, default=0)
    series: Mapped[str] = mapped_column(String(32), default="cpu")
    gpus: Mapped[int] = mapped_column(Integer, default=0)
    # {"gpus": {series: n}, "nodes": {series: n}}: what placement must find free (CPU: 1 slot).
    needs: Mapped[str] = mapped_column(Text, default="{}")
    # Fleets admission found able to run it (JSON list); placement only looks at these.
    eligible_fleets: Mapped[str] = mapped_column(Text, default="[]")
    runtime_id: Mapped[str] = mapped_column(String(100), default="")
    spec: Mapped[bytes] = mapped_column(LargeBinary)
    pools: Mapped[bytes] = mapped_column(LargeBinary)  # serialized repeated Pool (a JobSpec-free wrapper)
    resolved_config: Mapped[str] = mapped_column(Text, default="{}")
    image: Mapped[str] = mapped_column(String(500), default="")
    # Where the image came from (job_pb2.ImageSource) and that source in words.
    image_source: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    image_source_detail: Mapped[str] = mapped_column(Text, default="", server_default="")
    framework_version: Mapped[str] = mapped_column(String(64), default="", server_default="")
    # Admission's warnings (JSON list of sentences).
    warnings: Mapped[str] = mapped_column(Text, default="[]", server_default="[]")
    provenance: Mapped[bytes] = mapped_column(LargeBinary, default=b"")
    fleet: Mapped[str] = mapped_column(String(64), default="")
    parent_job_id: Mapped[str] = mapped_column(String(32), default="")
    stage: Mapped[str] = mapped_column(String(64), default="")
    retry_budget: Mapped[int] = mapped_column(Integer, default=0)
    retries_used: Mapped[int] = mapped_column(Integer, default=0)
    request_id: Mapped[str] = mapped_column(String(64), default="")
    wait_reason: Mapped[int] = mapped_column(Integer, default=0)
    wait_message: Mapped[str] = mapped_column(Text, default="")
    # 1-based position in dispatch order (fair share included), set by the scheduler each cycle.
    queue_position: Mapped[int] = mapped_column(Integer, default=0)
    # Why the platform (not the user) stopped or paused it: "window" or "drain"; such jobs are
    # queued again by the platform when the window opens or right after the drain paused them.
    stopped_by: Mapped[str] = mapped_column(String(16), default="")
    diagnosis: Mapped[bytes] = mapped_column(LargeBinary, default=b"")
    # What a user or the platform asked of the job while its attempt is active: a DesiredState
    # (0 nothing, STOP, PAUSE; state_machine.DESIRED_LEGAL); cleared when the job rests.
    # Stored as "", "stop", "pause" (DesiredColumn), the previous release's form.
    desired: Mapped[int] = mapped_column(DesiredColumn(), default=0)
    labels: Mapped[str] = mapped_column(Text, default="{}")
    out_dir: Mapped[str] = mapped_column(Text, default="")
    # Earliest time the scheduler may dispatch it (retry backoff).
    not_before: Mapped[float] = mapped_column(Float, default=0.0)
    attempts_count: Mapped[int] = mapped_column(Integer, default=0)
    # Cause of the next attempt (AttemptCause), set when the job is queued again.
    next_cause: Mapped[int] = mapped_column(Integer, default=1)
    # Log bytes the job's attempts stored, and those dropped past log_quota_bytes_per_job
    # (updated by ingest under the job's row lock, once per record like the lines themselves).
    log_bytes: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    log_dropped_bytes: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    event_seq: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # Monotonic admission order, used for FIFO inside a priority level.
    seq: Mapped[int] = mapped_column(Integer, default=0)

    __table_args__ = (
        Index("ix_jobs_state_queue", "state", "queue"),
        # Dispatch order inside a queue: covers queue_position's count and "the next job" without
        # touching the table rows (a submit's queue position was a scan of every QUEUED row).
        Index("ix_jobs_state_queue_priority_seq", "state", "queue", "priority", "seq"),
        Index("ix_jobs_owner_created", "owner", "created_at"),
        # Superseded by uq_jobs_owner_request; kept while the previous release may serve from this
        # database (its drop is a contract step, for a later release).
        Index("ix_jobs_owner_request", "owner", "request_id"),
        # The scheduler's incremental reads (control/scheduler/heads.py): jobs admitted since the
        # last seq it saw, and QUEUED jobs whose retry backoff ends (partial: only QUEUED (1) jobs
        # in backoff, so no other query's plan picks it over the dispatch order index).
        Index("ix_jobs_seq", "seq"),
        Index(
            "ix_jobs_queued_backoff",
            "not_before",
            sqlite_where=text("state = 1 AND not_before > 0"),
            postgresql_where=text("state = 1 AND not_before > 0"),
        ),
        # A finished job's waiting stages (pipeline.on_end), found without reading every QUEUED
        # job (a scan of the whole queue per finished job: seconds at 1,000,000 queued). Partial:
        # only stages have a parent; a query must name `parent_job_id != ''` to use it.
        Index(
            "ix_jobs_stages_waiting",
            "parent_job_id",
            "state",
            "wait_reason",
            sqlite_where=text("parent_job_id != ''"),
            postgresql_where=text("parent_job_id != ''"),
        ),
        # The jobs the platform stopped or paused (a window, a drain), asked for by every reconcile
        # pass (platform.requeue); partial, so STOPPED jobs a user stopped are not in it.
        Index(
            "ix_jobs_platform_stopped",
            "stopped_by",
            "state",
            sqlite_where=text("stopped_by != ''"),
            postgresql_where=text("stopped_by != ''"),
        ),
        # One job per (owner, request_id): a retried submission finds the job its first try
        # created, even when the retries race (jobs.create_job). Jobs without a request id are
        # not constrained.
        Index(
            "uq_jobs_owner_request",
            "owner",
            "request_id",
            unique=True,
            sqlite_where=text("request_id != ''"),
            postgresql_where=text("request_id != ''"),
        ),
    )


# Each owner's head of line in dispatch order (the scheduler's candidates query, dispatch.py).
Index("ix_jobs_state_owner_order", Job.state, Job.owner, Job.priority.desc(), Job.seq)


class Attempt(Base):
    __tablename__ = "attempts"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    job_id: Mapped[str] = mapped_column(String(32), index=True)
    number: Mapped[int] = mapped_column(Integer)
    state: Mapped[int] = mapped_column(Integer)
    cause: Mapped[int] = mapped_column(Integer, default=0)
    fleet: Mapped[str] = mapped_column(String(64), default="")
    executor_kind: Mapped[str] = mapped_column(String(16), default="")
    backend_handle: Mapped[str] = mapped_column(String(200), default="")
    node: Mapped[str] = mapped_column(String(200), default="")
    series: Mapped[str] = mapped_column(String(32), default="cpu")
    gpus: Mapped[int] = mapped_column(Integer, default=0)
    # JSON {series: GPUs or slots} held while active (copied from the job's needs).
    needs: Mapped[str] = mapped_column(Text, default="{}")
    capsule_digest: Mapped[str] = mapped_column(String(64), default="")
    # The serialized LaunchRequest, kept so a re-dispatch after a crash sends the same bytes.
    launch: Mapped[bytes] = mapped_column(LargeBinary, default=b"")
    # Lease for dispatch: which replica holds it and until when (two replicas never both launch).
    lease_owner: Mapped[str] = mapped_column(String(64), default="")
    lease_until: Mapped[float] = mapped_column(Float, default=0.0)
    # Launch calls that failed with a transient error (the attempt stays SUBMITTED and is retried).
    dispatch_tries: Mapped[int] = mapped_column(Integer, default=0)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    failure_class: Mapped[int] = mapped_column(Integer, default=0)
    reason: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # When the executor's Cleanup succeeded for this (ended) attempt.
    cleaned_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    __table_args__ = (
        UniqueConstraint("job_id", "number"),
        Index("ix_attempts_state", "state"),
        # the scheduler's recent usage for fair share: attempts still going or ended lately
        Index("ix_attempts_ended_at", "ended_at"),
    )


class JobEvent(Base):
    __tablename__ = "job_events"
    job_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    attempt_id: Mapped[str] = mapped_column(String(40), default="")
    from_state: Mapped[int] = mapped_column(Integer)
    to_state: Mapped[int] = mapped_column(Integer)
    at: Mapped[float] = mapped_column(Float)
    reason: Mapped[str] = mapped_column(Text, default="")
    # Only the attempt changed (a stale attempt ended after its job moved on); from/to are its states.
    attempt_only: Mapped[bool] = mapped_column(Boolean, default=False)


class LogLine(Base):
    __tablename__ = "log_lines"
    job_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    attempt_number: Mapped[int] = mapped_column(Integer, primary_key=True)
    offset: Mapped[int] = mapped_column(Integer, primary_key=True)
    stream: Mapped[int] = mapped_column(Integer)
    at: Mapped[float] = mapped_column(Float)
    text: Mapped[str] = mapped_column(Text)


class MetricPoint(Base):
    __tablename__ = "metric_points"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(32))
    attempt_number: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(200))
    step: Mapped[int] = mapped_column(Integer)
    value: Mapped[float] = mapped_column(Float)
    at: Mapped[float] = mapped_column(Float)
    __table_args__ = (Index("ix_metric_points_job_name_step", "job_id", "name", "step"),)


class MetricChunk(Base):
    """Points of one metric of one attempt stored by one ingest batch, in columns: little-endian
    int64 steps (empty when they are first_step, first_step + stride, ..., last_step), float64
    values and float64 times (epoch seconds), `points` of each. Every point stored since
    migration 0010 is here; metric_points holds the points stored before it."""

    __tablename__ = "metric_chunks"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(32))
    attempt_number: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(200))
    first_step: Mapped[int] = mapped_column(BigInteger)  # the smallest step of the chunk
    last_step: Mapped[int] = mapped_column(BigInteger)  # the largest
    points: Mapped[int] = mapped_column(Integer)
    step_data: Mapped[bytes] = mapped_column(LargeBinary)
    value_data: Mapped[bytes] = mapped_column(LargeBinary)
    time_data: Mapped[bytes] = mapped_column(LargeBinary)
    __table_args__ = (Index("ix_metric_chunks_job_name", "job_id", "name"),)


class Sample(Base):
    __tablename__ = "samples"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(32), index=True)
    attempt_number: Mapped[int] = mapped_column(Integer)
    step: Mapped[int] = mapped_column(Integer)
    prompt: Mapped[str] = mapped_column(Text)
    completion: Mapped[str] = mapped_column(Text)
    reward: Mapped[float | None] = mapped_column(Float, nullable=True)
    extra: Mapped[str] = mapped_column(Text, default="{}")
    at: Mapped[float] = mapped_column(Float)


class IngestCursor(Base):
    """Highest contiguous record seq stored per attempt, and the next log line offset."""

    __tablename__ = "ingest_cursors"
    attempt_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    job_id: Mapped[str] = mapped_column(String(32))
    attempt_number: Mapped[int] = mapped_column(Integer)
    acked_seq: Mapped[int] = mapped_column(Integer, default=0)
    next_log_offset: Mapped[int] = mapped_column(Integer, default=0)


class Dataset(Base):
    __tablename__ = "datasets"
    owner: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    version: Mapped[str] = mapped_column(String(64), primary_key=True)
    number: Mapped[int] = mapped_column(Integer)
    manifest: Mapped[bytes] = mapped_column(LargeBinary)
    description: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[float] = mapped_column(Float)


class Node(Base):
    __tablename__ = "nodes"
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    fleet: Mapped[str] = mapped_column(String(64), default="")
    address: Mapped[str] = mapped_column(String(200))
    info: Mapped[bytes] = mapped_column(LargeBinary)  # serialized forgelet.v1.Node
    state: Mapped[int] = mapped_column(Integer)
    last_heartbeat: Mapped[float] = mapped_column(Float)


class FleetState(Base):
    __tablename__ = "fleet_states"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    state: Mapped[int] = mapped_column(Integer)
    reason: Mapped[str] = mapped_column(Text, default="")
    updated_at: Mapped[float] = mapped_column(Float)


class Counter(Base):
    """Named monotonic counters (admission order)."""

    __tablename__ = "counters"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[int] = mapped_column(Integer, default=0)


class Secret(Base):
    """A user's or project's secret, sealed with the console's key (control/secrets.py).

    `holder` is the user (scope "user") or "@<user>/<name>" (scope "project"); `owner` is the user
    either way. `ciphertext` is nonce + AES-GCM output with (scope, holder, name) as associated
    data; `key_id` names the key that sealed it (a hash, never the key).
    """

    __tablename__ = "secrets"
    scope: Mapped[str] = mapped_column(String(8), primary_key=True)
    holder: Mapped[str] = mapped_column(String(200), primary_key=True)
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    owner: Mapped[str] = mapped_column(String(64), index=True)
    key_id: Mapped[str] = mapped_column(String(16))
    ciphertext: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    updated_by: Mapped[str] = mapped_column(String(64))


class TokenBinding(Base):
    """What a join, node or executor token is bound to: a node name (join, node) and a fleet."""

    __tablename__ = "token_bindings"
    token_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    node: Mapped[str] = mapped_column(String(200), default="", index=True)
    fleet: Mapped[str] = mapped_column(String(64), default="")


class BlobOwner(Base):
    """A user who uploaded (or re-uploaded) a blob: who may read it and learn that it exists."""

    __tablename__ = "blob_owners"
    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    user: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[float] = mapped_column(Float)
