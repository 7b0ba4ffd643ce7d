"""Configuration of the `slurm` executor (the `slurm:` section of the executor's config file).

    slurm:
      restd_url: http://slurm-head:6820
      user: starforge
      token_file: /etc/starforge/slurm.jwt        # or token: ..., or token_command: [...]
      partition: gpu
      staging_dir: /shared/starforge/staging      # same path on this host and on every node
      out_dir: /shared/starforge/out              # FORGE_OUT_DIR = <out_dir>/<job id>
      container_runtime: pyxis                     # none | pyxis | apptainer
      runtimes: {trl-0.19: /shared/images/trl-0.19.sqsh}
      inventory:
        - {series: h100, nodes: 16, gpus_per_node: 8, gres_type: h100, cpus_per_node: 96}
      ray: {node_ip: auto}

Everything the executor asks of Slurm is declared here: a pool whose series is not in the
inventory, or that needs more GPUs per node or more nodes than it lists, is refused at Launch
(InvalidArgument), never sent to another series. Checks run when the file is loaded, so a
misconfigured executor does not start.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from common.config import ConfigError
from executor_svc.base import RUNTIME_APPTAINER, RUNTIME_ENROOT, RUNTIME_HOST

CONTAINER_RUNTIMES = ("none", "pyxis", "apptainer")
# DescribeCapabilities.runtime per container_runtime. "host" for bare runs: the control plane
# sends image "host" jobs only to fleets whose runtime is "process" or "host".
RUNTIME_NAMES = {"none": RUNTIME_HOST, "pyxis": RUNTIME_ENROOT, "apptainer": RUNTIME_APPTAINER}
RAY_NODE_IP = ("auto", "loopback")
UNMAPPED_POLICIES = ("refuse", "default")
_UNIX_USER = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$")
_GRES_PART = re.compile(r"^[a-z][a-z0-9_]*$")
_GRES_TYPE = re.compile(r"^[A-Za-z0-9_.-]+$")
# Fields of job_desc_msg the executor sets itself: `job_fields` may not override them.
RESERVED_JOB_FIELDS = frozenset(
    {
        "name",
        "script",
        "environment",
        "current_working_directory",
        "standard_output",
        "standard_error",
        "standard_input",
        "comment",
        "nodes",
        "tasks",
        "tasks_per_node",
        "cpus_per_task",
        "tres_per_node",
        "memory_per_node",
        "requeue",
        # who the job runs as, and its hold until the tenant's files are handed over (tenants)
        "hold",
        "user_id",
        "group_id",
    }
)


@dataclasses.dataclass(frozen=True)
class SeriesConfig:
    """One GPU series of the cluster and how its GPUs are requested.

    GPUs are requested as gres `<gres_name>:<gres_type>:<n>` per node (`gpu:h100:8`), or
    `<gres_name>:<n>` when `gres_type` is empty. `partition` overrides the section's partition
    for this series (clusters often have one partition per GPU type). `cpus_per_node` and
    `memory_per_node_mb` (0: the partition's defaults) size what each node of a pool gets.
    """

    series: str
    nodes: int = 1
    gpus_per_node: int = 0
    gres_name: str = "gpu"
    gres_type: str = ""
    partition: str = ""
    cpus_per_node: int = 0
    memory_per_node_mb: int = 0

    def gres(self, gpus: int) -> str:
        """The per-node gres request for `gpus` GPUs ("" for none)."""
        if gpus <= 0:
            return ""
        return f"{self.gres_name}:{self.gres_type}:{gpus}" if self.gres_type else f"{self.gres_name}:{gpus}"


@dataclasses.dataclass(frozen=True)
class RayConfig:
    """How multi-node and multi-pool jobs get a Ray cluster (head on the first node of pool 0).

    `node_ip`: `auto` takes the head's address from Slurm (`scontrol show node` -> NodeAddr,
    resolved with getent) and lets every worker pick its address from its route to the head, as
    on any real cluster. `loopback` gives each Ray node its own 127.0.0.x address (head
    127.0.0.2, workers 127.0.0.3, ...): only for test clusters whose "nodes" share one host, so
    Ray never uses the host's network. (127.0.0.1 itself cannot be used: Ray replaces it with
    the host's primary address.)
    """

    enabled: bool = True
    # The Ray CLI where jobs run (in the image for container runtimes).
    command: str = "ray"
    node_ip: str = "auto"
    # GCS port of the head; 0: 20000 + (Slurm job id mod 20000), so jobs sharing a node differ.
    port: int = 0
    # Seconds the head and every worker get to join before the attempt fails (exit 96).
    start_timeout_seconds: int = 300
    # Object store size per node in bytes; 0: Ray's default (30% of the node's memory).
    object_store_memory_bytes: int = 0
    # Per-job Ray temp dir root on the nodes (session dirs, sockets); kept short for socket paths.
    temp_dir: str = "/tmp/sf-ray"
    # Extra `ray start` arguments for every node.
    extra_start_args: list[str] = dataclasses.field(default_factory=list)
    # Ray token authentication with a random token per job (made by the batch script, never
    # written down): other users of the nodes can neither join nor drive the job's Ray cluster.
    token_auth: bool = True


@dataclasses.dataclass(frozen=True)
class TenantsConfig:
    """Which Unix user each StarForge owner's jobs run as (empty maps: every job runs as `user`).

    `projects` ("@user/name" -> Unix user) wins over `users` (StarForge user name -> Unix user).
    The uid and gid are the cluster's: slurmctld resolves the name when the job is submitted,
    and the executor hands the attempt's directories to the uid slurmctld reports. An owner with
    no entry: `unmapped: refuse` fails the launch (PERMISSION_DENIED, naming the owner);
    `unmapped: default` runs the job as `default_user`, which then shares files with every other
    unmapped owner. The section's `user` must be SlurmUser or root: its token submits for them.
    """

    users: dict[str, str] = dataclasses.field(default_factory=dict)
    projects: dict[str, str] = dataclasses.field(default_factory=dict)
    unmapped: str = "refuse"
    default_user: str = ""

    @property
    def enabled(self) -> bool:
        return bool(self.users or self.projects)

    def unix_users(self) -> frozenset[str]:
        """Every Unix user this mapping may run jobs as."""
        names = set(self.users.values()) | set(self.projects.values())
        if self.unmapped == "default" and self.default_user:
            names.add(self.default_user)
        return frozenset(names)


@dataclasses.dataclass(frozen=True)
class SlurmConfig:
    """The `slurm:` section."""

    # slurmrestd base URL.
    restd_url: str = "http://127.0.0.1:6820"
    # Slurm user the executor submits as (X-SLURM-USER-NAME); jobs run as this user.
    user: str = ""
    # The JWT, one of three ways (first non-empty wins): the token itself; a file holding it
    # (re-read at every renewal, so an external agent can rotate it); a command printing it
    # (`scontrol token username=U lifespan=S` prints `SLURM_JWT=...`; both forms are accepted).
    token: str = ""
    token_file: str = ""
    token_command: list[str] = dataclasses.field(default_factory=list)
    # Seconds between renewals from token_file / token_command (keep below the token lifespan).
    token_refresh_seconds: float = 3600.0
    # Seconds for one slurmrestd call.
    request_timeout_seconds: float = 10.0
    # Default partition; empty: the cluster's default partition.
    partition: str = ""
    # Shared file system path, the same on this host and on every node: per attempt
    # <staging_dir>/<attempt_id>/{capsule,workspace,scratch}, the batch job's log and outcome.
    staging_dir: Path = Path("/shared/starforge/staging")
    # Shared file system root of FORGE_OUT_DIR (<out_dir>/<job_id>, kept across attempts).
    out_dir: Path = Path("/shared/starforge/out")
    # Blob cache; empty: <staging_dir>/.blobs (same file system, so files are hard-linked).
    cache_dir: str = ""
    # uid/gid jobs run as, when this executor runs as root and must hand the staged files to
    # the job user (-1: the executor already runs as the Slurm user; nothing is chowned).
    job_uid: int = -1
    job_gid: int = -1
    container_runtime: str = "none"
    # runtime_id (or image reference) -> what the container runtime runs: an image reference
    # for pyxis (`registry#repo:tag`) or a .sqsh path; a .sif path (or `docker://...`) for
    # apptainer. Unmapped: pyxis runs the request's image as is; apptainer refuses the launch.
    runtimes: dict[str, str] = dataclasses.field(default_factory=dict)
    # Extra bind mounts (`/src:/dst[:ro]`) for every container; staging_dir and out_dir are
    # always mounted at their own paths.
    container_mounts: list[str] = dataclasses.field(default_factory=list)
    apptainer_command: str = "apptainer"
    inventory: list[SeriesConfig] = dataclasses.field(default_factory=lambda: [SeriesConfig(series="cpu")])
    # Time limit of every job in minutes; 0: the partition's default.
    time_limit_minutes: int = 0
    # Extra job_desc_msg fields (data_parser v0.0.42 names) for every job component, e.g.
    # {account: ml, qos: high, constraints: "ib", reservation: ...}: what `#SBATCH` options
    # would say (slurmrestd does not read #SBATCH lines).
    job_fields: dict[str, Any] = dataclasses.field(default_factory=dict)
    # Lines run at the top of every batch script, before anything else (`module load ...`).
    script_preamble: list[str] = dataclasses.field(default_factory=list)
    # PATH of the job (the REST API starts jobs with only the environment it is given).
    path: str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    # Python where jobs run (Ray readiness check); the capsule's bootstrap finds its own.
    python: str = "python3"
    ray: RayConfig = dataclasses.field(default_factory=RayConfig)
    # Names this executor's jobs (label starforge.dev/executor): two executors sharing a Slurm
    # user never list, observe or clean up each other's attempts.
    executor_name: str = "slurm"
    # Seconds between SIGTERM and SIGKILL of the training command when the request gives none.
    # (A cancel's own grace is the cluster's KillWait.)
    default_stop_grace_seconds: int = 10
    # Blobs fetched at once per launch.
    fetch_concurrency: int = 8
    # Per-owner Unix users (TenantsConfig); unset: every job runs as `user`.
    tenants: TenantsConfig = dataclasses.field(default_factory=TenantsConfig)

    def __post_init__(self) -> None:
        _check(self)

    @property
    def runtime_name(self) -> str:
        return RUNTIME_NAMES[self.container_runtime]

    @property
    def blob_cache(self) -> Path:
        return Path(self.cache_dir) if self.cache_dir else self.staging_dir / ".blobs"

    def series(self, name: str) -> SeriesConfig | None:
        return next((s for s in self.inventory if s.series == name), None)


def _check(cfg: SlurmConfig) -> None:
    if cfg.container_runtime not in CONTAINER_RUNTIMES:
        raise ConfigError(
            f"slurm.container_runtime: {cfg.container_runtime!r} is not one of {', '.join(CONTAINER_RUNTIMES)}"
        )
    if cfg.ray.node_ip not in RAY_NODE_IP:
        raise ConfigError(f"slurm.ray.node_ip: {cfg.ray.node_ip!r} is not one of {', '.join(RAY_NODE_IP)}")
    if not (0 <= cfg.ray.port < 65536):
        raise ConfigError(f"slurm.ray.port: {cfg.ray.port} is not a port number (0: derived from the job id)")
    if cfg.ray.start_timeout_seconds < 1:
        raise ConfigError("slurm.ray.start_timeout_seconds must be at least 1")
    for name in ("staging_dir", "out_dir"):
        if not getattr(cfg, name).is_absolute():
            raise ConfigError(f"slurm.{name}: {getattr(cfg, name)} must be an absolute path (jobs see it as is)")
    if cfg.cache_dir and not Path(cfg.cache_dir).is_absolute():
        raise ConfigError(f"slurm.cache_dir: {cfg.cache_dir} must be an absolute path")
    if (cfg.job_uid < 0) != (cfg.job_gid < 0):
        raise ConfigError("slurm.job_uid and slurm.job_gid are set together (or neither)")
    if cfg.token_refresh_seconds <= 0:
        raise ConfigError("slurm.token_refresh_seconds must be positive")
    reserved = sorted(set(cfg.job_fields) & RESERVED_JOB_FIELDS)
    if reserved:
        raise ConfigError(
            f"slurm.job_fields: {', '.join(reserved)} are set by the executor itself; "
            "use inventory (nodes, GPUs, CPUs, memory) or the section's own keys instead"
        )
    _check_tenants(cfg)
    if not cfg.inventory:
        raise ConfigError("slurm.inventory: list at least one series")
    seen: set[str] = set()
    for s in cfg.inventory:
        where = f"slurm.inventory[{s.series}]"
        if s.series in seen:
            raise ConfigError(f"slurm.inventory: series {s.series!r} is listed twice")
        seen.add(s.series)
        if s.nodes < 1:
            raise ConfigError(f"{where}.nodes must be at least 1")
        if s.gpus_per_node < 0 or s.cpus_per_node < 0 or s.memory_per_node_mb < 0:
            raise ConfigError(f"{where}: gpus_per_node, cpus_per_node and memory_per_node_mb must be >= 0")
        if not _GRES_PART.match(s.gres_name):
            raise ConfigError(f"{where}.gres_name: {s.gres_name!r} is not a gres name (e.g. 'gpu')")
        if s.gres_type and not _GRES_TYPE.match(s.gres_type):
            raise ConfigError(f"{where}.gres_type: {s.gres_type!r} is not a gres type (e.g. 'h100')")


def _check_tenants(cfg: SlurmConfig) -> None:
    t = cfg.tenants
    if t.unmapped not in UNMAPPED_POLICIES:
        raise ConfigError(f"slurm.tenants.unmapped: {t.unmapped!r} is not one of {', '.join(UNMAPPED_POLICIES)}")
    if not t.enabled:
        if t.default_user or t.unmapped != "refuse":
            raise ConfigError("slurm.tenants: unmapped/default_user need users or projects to map")
        return
    if t.unmapped == "default" and not t.default_user:
        raise ConfigError("slurm.tenants.default_user: name the Unix user of unmapped owners (unmapped: default)")
    if t.unmapped == "refuse" and t.default_user:
        raise ConfigError("slurm.tenants.default_user is used only with unmapped: default")
    if cfg.job_uid >= 0:
        raise ConfigError(
            "slurm.job_uid/job_gid do not apply with slurm.tenants: each job's uid is the one slurmctld "
            "resolves for its Unix user"
        )
    entries = [(f"users.{k}", v) for k, v in t.users.items()] + [(f"projects.{k}", v) for k, v in t.projects.items()]
    if t.default_user:
        entries.append(("default_user", t.default_user))
    for where, name in entries:
        if not _UNIX_USER.match(name):
            raise ConfigError(f"slurm.tenants.{where}: {name!r} is not a Unix user name")
        if name == "root":
            raise ConfigError(f"slurm.tenants.{where}: jobs never run as root")
    for project in t.projects:
        if not project.startswith("@") or "/" not in project:
            raise ConfigError(f"slurm.tenants.projects: {project!r} is not a project (@<user>/<name>)")
