"""Typed requests to and answers from slurmrestd (data_parser v0.0.42, see `api.py`).

Requests are frozen dataclasses rendered to the pinned JSON shape here and nowhere else; answers
are parsed into dataclasses right away, so the rest of the executor never touches raw JSON.

Labels: slurmrestd has no free-form labels, so a job's StarForge labels are stored as JSON in its
`comment` (`starforge:{"starforge.dev/attempt-id": ...}`). `comment` is settable by the submitting
user (unlike `admin_comment`, which needs an operator) and is returned by `GET /jobs/`, which is
how a restarted executor finds its own jobs.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from common import errors

LABELS_PREFIX = "starforge:"
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"

# Base states of a Slurm job (job_state[] also carries flags such as COMPLETING or REQUEUED).
BASE_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "SUSPENDED",
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
    }
)
_GRES = re.compile(r"^[a-z][a-z0-9_]*(:[A-Za-z0-9_.-]+)?:[1-9][0-9]*$")


def encode_labels(labels: Mapping[str, str]) -> str:
    """The `comment` that carries `labels` (compact, sorted: equal labels give equal comments)."""
    return LABELS_PREFIX + json.dumps(dict(labels), sort_keys=True, separators=(",", ":"))


def decode_labels(comment: str) -> dict[str, str]:
    """Labels from a job's `comment`; {} for jobs StarForge did not label (or mangled comments)."""
    if not comment.startswith(LABELS_PREFIX):
        return {}
    try:
        value = json.loads(comment.removeprefix(LABELS_PREFIX))
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {str(key): str(item) for key, item in value.items()}


@dataclass(frozen=True)
class JobComponent:
    """Resources of a job, or of one component of a heterogeneous job.

    `gres_per_node` is Slurm's --gres syntax without the "gres/" prefix: "gpu:2" or "gpu:h100:2".
    """

    nodes: int = 1
    tasks: int | None = None
    tasks_per_node: int | None = None
    cpus_per_task: int | None = None
    gres_per_node: str = ""
    memory_per_node_mb: int | None = None
    partition: str = ""

    def validate(self, where: str) -> None:
        violations = []
        for name in ("nodes", "tasks", "tasks_per_node", "cpus_per_task", "memory_per_node_mb"):
            value = getattr(self, name)
            if value is not None and value < 1:
                violations.append(errors.FieldViolation(f"{where}.{name}", f"must be at least 1, got {value}"))
        if self.gres_per_node and not _GRES.match(self.gres_per_node):
            violations.append(
                errors.FieldViolation(
                    f"{where}.gres_per_node",
                    f"{self.gres_per_node!r} is not NAME[:TYPE]:COUNT, e.g. 'gpu:2' or 'gpu:h100:2'",
                )
            )
        if violations:
            raise errors.InvalidArgument(
                message="; ".join(f"{v.field}: {v.description}" for v in violations),
                field_violations=tuple(violations),
            )

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"nodes": str(self.nodes)}
        if self.tasks is not None:
            body["tasks"] = self.tasks
        if self.tasks_per_node is not None:
            body["tasks_per_node"] = self.tasks_per_node
        if self.cpus_per_task is not None:
            body["cpus_per_task"] = self.cpus_per_task
        if self.gres_per_node:
            body["tres_per_node"] = f"gres/{self.gres_per_node}"
        if self.memory_per_node_mb is not None:
            body["memory_per_node"] = {"set": True, "infinite": False, "number": self.memory_per_node_mb}
        if self.partition:
            body["partition"] = self.partition
        return body


@dataclass(frozen=True)
class BatchJob:
    """A batch script and where and how to run it (one component's resources come separately).

    Paths are as the job sees them; with the test cluster they equal the host's (README of
    tools/slurm). Slurm refuses a job without any environment variable, hence the PATH default.
    Jobs are submitted with `requeue=False`: retries are StarForge's decision (a new attempt), not
    Slurm's, so a node failure ends the attempt as NODE_FAIL instead of silently re-running it.
    """

    name: str
    script: str
    working_directory: str
    environment: Mapping[str, str] = field(default_factory=lambda: {"PATH": DEFAULT_PATH})
    labels: Mapping[str, str] = field(default_factory=dict)
    partition: str = ""
    standard_output: str = ""
    standard_error: str = ""
    time_limit_minutes: int | None = None
    # Further job_desc_msg fields (account, qos, constraints, ...) for every component, as the
    # fleet's configuration gives them; fields set above win.
    extra: Mapping[str, Any] = field(default_factory=dict)
    # Submitted held (priority 0): it runs only after `SlurmClient.release`.
    hold: bool = False

    def validate(self) -> None:
        problems = []
        if not self.name:
            problems.append(errors.FieldViolation("name", "must not be empty"))
        if not self.script.startswith("#!"):
            problems.append(errors.FieldViolation("script", "must start with a #! line (Slurm requires it)"))
        if not self.working_directory.startswith("/"):
            problems.append(errors.FieldViolation("working_directory", "must be an absolute path"))
        if not self.environment:
            problems.append(errors.FieldViolation("environment", "must hold at least one variable (e.g. PATH)"))
        if any("=" in key or not key for key in self.environment):
            problems.append(errors.FieldViolation("environment", "names must be non-empty and contain no '='"))
        if self.time_limit_minutes is not None and self.time_limit_minutes < 1:
            problems.append(errors.FieldViolation("time_limit_minutes", "must be at least 1"))
        if problems:
            raise errors.InvalidArgument(
                message="; ".join(f"{p.field}: {p.description}" for p in problems),
                field_violations=tuple(problems),
            )

    def component_json(self, resources: JobComponent, *, first: bool) -> dict[str, Any]:
        """One job_desc_msg: this job's common fields plus `resources` (script only in the first)."""
        body: dict[str, Any] = dict(self.extra)
        body |= {
            "name": self.name,
            "current_working_directory": self.working_directory,
            "environment": [f"{key}={value}" for key, value in sorted(self.environment.items())],
            "requeue": False,
        }
        if self.hold:
            body["hold"] = True
        if self.labels:
            body["comment"] = encode_labels(self.labels)
        if self.partition:
            body["partition"] = self.partition
        if self.time_limit_minutes is not None:
            body["time_limit"] = {"set": True, "infinite": False, "number": self.time_limit_minutes}
        if first:
            body["script"] = self.script
            if self.standard_output:
                body["standard_output"] = self.standard_output
            if self.standard_error:
                body["standard_error"] = self.standard_error
        body.update(resources.to_json())
        return body


@dataclass(frozen=True)
class SubmittedJob:
    """What `submit` returns. `warnings` are slurmrestd's (e.g. an ignored field), kept visible."""

    job_id: int
    warnings: tuple[str, ...] = ()
    user_message: str = ""


@dataclass(frozen=True)
class Controller:
    hostname: str
    responding: bool
    mode: str


@dataclass(frozen=True)
class PingInfo:
    """slurmrestd reached, its Slurm release and data_parser, and slurmctld's answer."""

    release: str
    cluster: str
    data_parser: str
    controllers: tuple[Controller, ...]

    @property
    def responding(self) -> bool:
        return any(controller.responding for controller in self.controllers)


@dataclass(frozen=True)
class SlurmJob:
    """One job as slurmctld reports it.

    `state` is the base state (RUNNING, COMPLETED, ...), `state_flags` the rest of job_state[]
    (COMPLETING, REQUEUED, ...). For a heterogeneous job, `components` holds every component's
    record in offset order (the leader's own record first); it is empty for ordinary jobs.
    `exit_code` is None until the job ended; `exit_signal` is set when a signal ended it.
    """

    job_id: int
    name: str
    state: str
    state_flags: tuple[str, ...]
    state_reason: str
    exit_code: int | None
    exit_signal: int | None
    nodes: str
    partition: str
    user_name: str
    comment: str
    labels: Mapping[str, str]
    submit_time: dt.datetime | None
    start_time: dt.datetime | None
    end_time: dt.datetime | None
    het_job_id: int | None
    het_job_offset: int | None
    working_directory: str
    standard_output: str
    standard_error: str
    components: tuple[SlurmJob, ...] = ()
    # The job's uid and gid, as slurmctld resolved its user.
    user_id: int | None = None
    group_id: int | None = None

    @property
    def is_het_leader(self) -> bool:
        return self.het_job_id == self.job_id


def _no_val(value: Any) -> int | None:
    """A v0.0.4x `{set, infinite, number}` struct (or a plain int) as an int; None if unset/infinite."""
    if isinstance(value, bool):
        raise TypeError(f"expected a number, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, Mapping):
        if not value.get("set") or value.get("infinite"):
            return None
        number = value.get("number")
        return int(number) if isinstance(number, int | float) else None
    if value is None:
        return None
    raise TypeError(f"expected a number or a {{set, infinite, number}} struct, got {value!r}")


def _time(value: Any) -> dt.datetime | None:
    seconds = _no_val(value)
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC) if seconds else None


def split_state(job_state: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """(base state, flags) from a v0.0.40+ job_state list; ValueError if there is no base state."""
    bases = [name for name in job_state if name in BASE_STATES]
    if len(bases) != 1:
        raise ValueError(f"job_state {list(job_state)} does not hold exactly one base state")
    return bases[0], tuple(name for name in job_state if name not in BASE_STATES)


def parse_job(raw: Mapping[str, Any]) -> SlurmJob:
    """A SlurmJob from one `jobs[]` entry; ValueError/TypeError/KeyError on an unexpected shape."""
    states = raw["job_state"]
    if isinstance(states, str):  # pre-v0.0.40 shape: the pinned version must not produce it
        raise TypeError(f"job_state is a string ({states!r}); expected a list (data_parser v0.0.40+)")
    state, flags = split_state(states)
    exit_raw = raw.get("exit_code") or {}
    ended = state not in ("PENDING", "RUNNING", "SUSPENDED")  # before that, exit_code reads 0
    signal_raw = exit_raw.get("signal") or {}
    comment = str(raw.get("comment") or "")
    het_job_id = _no_val(raw.get("het_job_id"))
    return SlurmJob(
        job_id=int(raw["job_id"]),
        name=str(raw.get("name") or ""),
        state=state,
        state_flags=flags,
        state_reason=str(raw.get("state_reason") or ""),
        exit_code=_no_val(exit_raw.get("return_code")) if ended else None,
        exit_signal=(_no_val(signal_raw.get("id")) or None) if ended else None,
        nodes=str(raw.get("nodes") or ""),
        partition=str(raw.get("partition") or ""),
        user_name=str(raw.get("user_name") or ""),
        user_id=_int_or_none(raw.get("user_id")),
        group_id=_int_or_none(raw.get("group_id")),
        comment=comment,
        labels=decode_labels(comment),
        submit_time=_time(raw.get("submit_time")),
        start_time=_time(raw.get("start_time")),
        end_time=_time(raw.get("end_time")),
        het_job_id=het_job_id or None,
        het_job_offset=_no_val(raw.get("het_job_offset")) if het_job_id else None,
        working_directory=str(raw.get("current_working_directory") or ""),
        standard_output=str(raw.get("standard_output") or ""),
        standard_error=str(raw.get("standard_error") or ""),
    )


def group_components(records: Sequence[SlurmJob]) -> list[SlurmJob]:
    """Fold heterogeneous components into their leader; ordinary jobs pass through, sorted by id."""
    by_het: dict[int, list[SlurmJob]] = {}
    plain: list[SlurmJob] = []
    for job in records:
        if job.het_job_id is None:
            plain.append(job)
        else:
            by_het.setdefault(job.het_job_id, []).append(job)
    for het_id, parts in by_het.items():
        parts.sort(key=lambda part: part.het_job_offset or 0)
        leader = next((part for part in parts if part.job_id == het_id), parts[0])
        # Components other than the leader may lack the comment: the leader's labels speak for all.
        plain.append(replace(leader, components=tuple(parts)))
    return sorted(plain, key=lambda job: job.job_id)


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
