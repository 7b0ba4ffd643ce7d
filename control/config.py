"""ControlConfig: the control plane's configuration (defaults -> YAML file -> STARFORGE_* env)."""

from __future__ import annotations

import os
import pathlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from common.config import ConfigError, load_config
from common.tls import TlsConfig, check_dial, check_listen, host_of, is_loopback
from control import bundled, images, windows

EXECUTOR_KINDS = ("local", "agent", "kuberay", "slurm")
# Executor kinds whose jobs run on other machines than the control plane's.
REMOTE_KINDS = ("agent", "kuberay", "slurm")
# Listen hosts that mean "every interface": as a public address the console falls back to 127.0.0.1.
WILDCARD_HOSTS = ("", "0.0.0.0", "::")


@dataclass(frozen=True)
class InventoryConfig:
    """GPUs of one series in a fleet: `nodes` x `gpus_per_node`."""

    series: str
    nodes: int = 1
    gpus_per_node: int = 0
    # For CPU series (no GPUs): how many jobs may run at once; 0 means no limit.
    slots: int = 0


# The queue of a job submitted without --queue, and of fleets that name no queues.
DEFAULT_QUEUE = "default"
QUEUE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


@dataclass(frozen=True)
class FleetConfig:
    """A group of machines run by one executor kind, reached at `address`.

    The kind decides the executor: the control plane checks at start-up that the executor at
    `address` reports this kind and refuses to start otherwise (never another backend).
    """

    name: str
    kind: str
    address: str
    inventory: list[InventoryConfig] = field(default_factory=list)
    token: str = ""
    window: str = ""
    # Named queues this fleet serves (`sf submit --queue Q`); empty: only the default queue.
    queues: list[str] = field(default_factory=list)
    # The fleet runs jobs in its machines' own environment, without a container (the local
    # executor's process runtime, Slurm without a container runtime). Declared, never guessed: a job
    # no source gave an image then runs here as image "host", and says so (docs/images.md).
    host_runtime: bool = False
    # Production hardware: a job that may run here with an image pinned by tag instead of by
    # digest is admitted with a warning (a tag can be moved; a digest cannot).
    production: bool = False

    def serves(self, queue: str) -> bool:
        """Whether jobs of `queue` ("" or DEFAULT_QUEUE: the default queue) may run on this fleet."""
        return (queue or DEFAULT_QUEUE) in (self.queues or [DEFAULT_QUEUE])


@dataclass(frozen=True)
class QuotaConfig:
    """A cap on GPUs of one series in use at once, for a user or a project.

    `user` names a user ("*": every user, each on its own); `project` names a project ("@alice/lab";
    "*": every project). Set exactly one. For a CPU series the cap counts jobs. A job over quota is
    not refused: it waits in QUEUED with reason QUOTA and starts when the quota frees.
    """

    series: str
    gpus: int
    user: str = ""
    project: str = ""


@dataclass(frozen=True)
class ProfileConfig:
    """One GPU series of the hardware registry."""

    series: str
    gpus_per_node: int
    gpu_memory_gib: int = 0
    interconnect: str = ""
    default_gpus: int = 0
    max_nodes: int = 1
    description: str = ""


DEFAULT_PROFILES = [
    ProfileConfig("h200", 8, 141, "nvlink+ib-400g", 8, 64, "NVIDIA H200 SXM, 8 per node"),
    ProfileConfig("h100", 8, 80, "nvlink+ib-400g", 8, 64, "NVIDIA H100 SXM, 8 per node"),
    ProfileConfig("a100", 8, 80, "nvlink+ib-200g", 8, 32, "NVIDIA A100 80GB, 8 per node"),
    ProfileConfig("l40s", 4, 48, "pcie", 1, 8, "NVIDIA L40S, 4 per node"),
    ProfileConfig("cpu", 0, 0, "none", 0, 1, "CPU only (no GPU)"),
]


@dataclass(frozen=True)
class ControlConfig:
    """Everything the control plane needs; see docs/configuration.md for each key."""

    listen: str = "127.0.0.1:7070"
    # Address jobs use to reach ingest and blobs; empty means `listen` (fine on one machine).
    public_address: str = ""
    # IngestService (runs' telemetry) on a port of its own, served by gRPC's thread-pool server
    # (control/ingest_port.py); empty: on `listen` with every other service.
    ingest_listen: str = ""
    # Address runs report to when `ingest_listen` is set; empty means `ingest_listen`.
    public_ingest_address: str = ""
    # Report streams the ingest port serves at once (two threads each); beyond: RESOURCE_EXHAUSTED.
    ingest_max_streams: int = 1000
    # Let agent/kuberay/slurm fleets be told a loopback public_address (tests on one host only).
    allow_loopback_public_address: bool = False
    state_dir: pathlib.Path = pathlib.Path("~/.local/share/starforge/console")
    # SQLAlchemy URL; empty means SQLite in state_dir. PostgreSQL: postgresql+psycopg://...
    database_url: str = ""
    blob_dir: pathlib.Path | None = None
    # The capsule (manifest.json, bootstrap.sh, runner.pex): an installed wheel's own (package
    # data), else build/capsule (`make capsule` in a source checkout).
    capsule_dir: pathlib.Path = field(default_factory=bundled.default_capsule_dir)
    fleets: list[FleetConfig] = field(default_factory=list)
    profiles: list[ProfileConfig] = field(default_factory=lambda: list(DEFAULT_PROFILES))
    quotas: list[QuotaConfig] = field(default_factory=list)
    # Fair share remembers each user's usage with this half-life (seconds).
    fair_share_half_life_seconds: float = 3600.0
    # Registries or repository paths images may come from ("registry.local", "nvcr.io/nvidia"),
    # matched at '/' boundaries; empty allows none except "host" on host-runtime fleets.
    image_allowlist: list[str] = field(default_factory=list)
    # Framework -> default image (the console's framework default); FORGE_IMAGE_<FRAMEWORK> in the
    # console's environment wins over it (docs/images.md).
    default_images: dict[str, str] = field(default_factory=dict)
    # YAML file mapping framework and framework version to an image (docs/images.md); empty: none.
    runtime_registry_file: pathlib.Path | None = None
    scheduler_interval_seconds: float = 0.5
    reconcile_interval_seconds: float = 2.0
    executor_deadline_seconds: float = 30.0
    default_retry_budget: int = 2
    stop_grace_seconds: int = 10
    # A forgelet node silent for this long is lost; its attempts fail as node lost (retryable).
    node_timeout_seconds: float = 15.0
    # Create this admin user at start when there are no users; its token goes to state_dir/admin-token.
    bootstrap_admin: str = ""
    # HTTP port for /healthz, Prometheus /metrics and GET /v1/blobs/<sha256> (pods fetching
    # capsules with plain Python); empty disables it.
    http_listen: str = ""
    # URL jobs use to reach http_listen; empty means http://<http_listen>.
    public_http_url: str = ""
    # The web console: envoy (grpc_web) listens here and serves the UI and the API on one origin;
    # empty disables it. Needs the HTTP port (one on 127.0.0.1 is opened when http_listen is empty).
    ui_listen: str = ""
    # The built web UI, served at / on the HTTP port: an installed wheel's own (package data),
    # else the checkout's web/dist (`make web`).
    ui_dir: pathlib.Path = field(default_factory=bundled.default_ui_dir)
    # HuggingFace precheck at admission (models/datasets exist; gated ones accessible).
    hf_precheck: bool = True
    hf_endpoint: str = "https://huggingface.co"
    # Read-only HuggingFace token for the admission precheck only: it is never put into a job.
    hf_token: str = ""
    # The key secrets are sealed with (32 random bytes, mode 0600; every replica reads the same
    # file). Empty: the console keeps no secrets. `sf up` creates <state_dir>/secrets.key.
    secrets_key_file: pathlib.Path | None = None
    # Previous keys, to rotate: rows sealed with one are re-sealed with secrets_key_file at start.
    secrets_old_key_files: list[pathlib.Path] = field(default_factory=list)
    log_level: str = "info"
    # TLS of the gRPC, HTTP and UI ports and of the channels to executors (docs/security.md).
    tls: TlsConfig = field(default_factory=TlsConfig)
    # Bounded work per input (docs/security.md). A log line longer than this many bytes
    # is stored cut, with a marker saying how many bytes were dropped.
    max_log_line_bytes: int = 16384
    # Log bytes one job may store (all attempts); later lines are dropped after one marker line.
    log_quota_bytes_per_job: int = 1 << 30
    # Scalars one metrics record may carry; the rest are dropped with a marker line.
    max_metric_points_per_record: int = 1000
    # Samples one record may carry, and the bytes of each sample text (prompt, completion, extra).
    max_samples_per_record: int = 100
    max_sample_field_bytes: int = 65536
    # The failure diagnosis reads the log tail in a worker thread for at most this long.
    diagnosis_timeout_seconds: float = 5.0
    # SubmitJob calls per second per user (token bucket, per replica; admins are exempt); 0: no limit.
    submit_rate_per_user: float = 20.0
    # Submissions a user may make at once before the rate applies.
    submit_burst_per_user: int = 100
    # StreamJobLogs and WatchJob calls one user's personal tokens may hold open at once (per
    # replica; admins exempt; control.stream_limit); 0: no limit.
    streams_per_user: int = 1000
    # HTTP port: connections open at once (more are answered 503 at once, without a thread).
    http_max_connections: int = 256
    # HTTP port: connections still sending their request head (no thread each); beyond, the
    # oldest of them is closed to make room.
    http_max_pending_connections: int = 1024
    # HTTP port: a connection must send its whole request head within this many seconds.
    http_header_timeout_seconds: float = 10.0
    # HTTP port: a connection that neither sends nor takes bytes for this long is closed.
    http_idle_timeout_seconds: float = 60.0
    # HTTP port: the most bytes of request line and headers a request may have (431 beyond).
    http_max_header_bytes: int = 16384

    @property
    def resolved_state_dir(self) -> pathlib.Path:
        return self.state_dir.expanduser().resolve()

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.resolved_state_dir / 'ledger.db'}"

    @property
    def resolved_blob_dir(self) -> pathlib.Path:
        return (self.blob_dir or self.resolved_state_dir / "blobs").expanduser().resolve()

    def fleet(self, name: str) -> FleetConfig | None:
        return next((f for f in self.fleets if f.name == name), None)

    def queue_names(self) -> list[str]:
        """Every queue some fleet serves, sorted (the default queue when a fleet names none)."""
        return sorted({q for f in self.fleets for q in (f.queues or [DEFAULT_QUEUE])})

    def _validate_limits(self) -> None:
        for name in POSITIVE_LIMITS:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be greater than 0, got {getattr(self, name)}")
        if self.max_log_line_bytes < 256:
            raise ConfigError(f"max_log_line_bytes must be at least 256, got {self.max_log_line_bytes}")
        if self.submit_rate_per_user < 0:
            raise ConfigError(
                f"submit_rate_per_user must not be negative (0: no limit), got {self.submit_rate_per_user}"
            )
        if self.streams_per_user < 0:
            raise ConfigError(f"streams_per_user must not be negative (0: no limit), got {self.streams_per_user}")

    def validate(self) -> None:
        """Checks that need more than types; raises ConfigError."""
        names = [f.name for f in self.fleets]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ConfigError(f"fleets: duplicate fleet name {sorted(dup)[0]!r}")
        known_series = {p.series for p in self.profiles}
        self._validate_limits()
        for q in self.quotas:
            if bool(q.user) == bool(q.project):
                raise ConfigError(f"quotas: set exactly one of user or project (series {q.series})")
            if q.gpus < 0:
                raise ConfigError(f"quotas: gpus must not be negative (series {q.series})")
        self.validate_tls()
        self.validate_images()
        self.validate_public_address()
        for f in self.fleets:
            try:
                windows.parse(f.window)
            except ConfigError as e:
                raise ConfigError(f"fleets.{f.name}.window: {e}") from None
            if f.kind == "kuberay" and not self.http_listen:
                raise ConfigError(
                    f"fleets.{f.name}: kuberay pods fetch their capsule over HTTP; set http_listen "
                    "(and public_http_url when pods cannot reach it directly)"
                )
            if f.kind not in EXECUTOR_KINDS:
                raise ConfigError(
                    f"fleets.{f.name}.kind: unknown executor kind {f.kind!r}; valid kinds: {', '.join(EXECUTOR_KINDS)}"
                )
            for queue in f.queues:
                if not QUEUE_NAME.match(queue):
                    raise ConfigError(
                        f"fleets.{f.name}.queues: {queue!r} is not a queue name (lower-case letters, digits, - and _)"
                    )
            if not f.address or ":" not in f.address:
                raise ConfigError(f"fleets.{f.name}.address: expected host:port, got {f.address!r}")
            for inv in f.inventory:
                if inv.series not in known_series:
                    raise ConfigError(
                        f"fleets.{f.name}.inventory: series {inv.series!r} is not in the hardware "
                        f"registry ({', '.join(sorted(known_series))})"
                    )

    def validate_images(self) -> None:
        """Allowlist entries are registry or repository paths; the registry file parses."""
        for entry in self.image_allowlist:
            images.check_allow_entry(entry)
        for framework, image in self.default_images.items():
            if image != images.HOST_IMAGE and images.parse_ref(image) is None:
                raise ConfigError(f"default_images.{framework}: {image!r} is not an image reference")
        images.load_registry(self.runtime_registry_file)

    def validate_public_address(self) -> None:
        """Jobs on other machines (agent, kuberay, slurm fleets) cannot reach a loopback address:
        refuse to tell them one, unless `allow_loopback_public_address` (everything on one host)."""
        remote = sorted({f.kind for f in self.fleets if f.kind in REMOTE_KINDS})
        if not remote or self.allow_loopback_public_address:
            return
        told = {"public_address": self.public_address or self.listen}
        if self.ingest_listen:
            told["public_ingest_address"] = self.public_ingest_address or self.ingest_listen
        if any(f.kind == "kuberay" for f in self.fleets) and (self.public_http_url or self.http_listen):
            told["public_http_url"] = self.public_http_url or f"http://{self.http_listen}"
        for key, address in told.items():
            host = host_of(address)
            if is_loopback(address) or host in WILDCARD_HOSTS:
                raise ConfigError(
                    f"{key}: {address} is a loopback address (or, from `listen`, falls back to 127.0.0.1), "
                    f"but {', '.join(remote)} fleets run jobs on other machines, which would reach "
                    f"themselves instead of this console; set {key} to an address those machines reach "
                    "(allow_loopback_public_address: true only when every fleet runs on this host)"
                )

    def validate_tls(self) -> None:
        """Plaintext only on loopback (or with tls.plaintext); jobs need the CA that verifies us."""
        if self.tls.client_ca_file:
            raise ConfigError(
                "tls.client_ca_file: the control plane serves users and jobs, which have no client "
                "certificates; mutual TLS is for executors and forgelets"
            )
        if self.tls.serving and not self.tls.ca_file:
            raise ConfigError(
                "tls.ca_file: required with tls.cert_file; jobs and executors verify this control plane with it"
            )
        check_listen(self.listen, self.tls, "listen")
        if self.http_listen:
            check_listen(self.http_listen, self.tls, "http_listen")
        if self.ui_listen:
            check_listen(self.ui_listen, self.tls, "ui_listen")
        if self.ingest_listen:
            check_listen(self.ingest_listen, self.tls, "ingest_listen")
        for f in self.fleets:
            check_dial(f.address, self.tls, f"fleets.{f.name}.address")


POSITIVE_LIMITS = (
    "max_log_line_bytes",
    "log_quota_bytes_per_job",
    "max_metric_points_per_record",
    "max_samples_per_record",
    "max_sample_field_bytes",
    "diagnosis_timeout_seconds",
    "submit_burst_per_user",
    "http_max_connections",
    "http_max_pending_connections",
    "http_header_timeout_seconds",
    "http_idle_timeout_seconds",
    "http_max_header_bytes",
    "ingest_max_streams",
)


def load(path: pathlib.Path | str | None, env: Mapping[str, str] | None = None) -> ControlConfig:
    """Load and validate the control plane configuration."""
    cfg = load_config(ControlConfig, path, os.environ if env is None else env)
    cfg.validate()
    return cfg
