"""The Executor contract every kind implements (local, agent, kuberay, slurm).

Modelled on dstack's `Compute`: a small required core with the contract in docstrings, and
optional capabilities declared rather than assumed. The gRPC servicer (`executor_svc.service`)
only adapts protos to these calls.

Shared semantics (tests in tests/integration/executors check them on every kind):
- `launch` is idempotent per attempt id: launching an attempt that exists returns its handle with
  `already_launched=True` and starts nothing.
- `stop` never fails because the attempt is already gone or never existed.
- `cleanup` frees every backend object and scratch space of the attempt, but never FORGE_OUT_DIR.
- every backend object carries the labels in `labels_for(request)`, so that `list_attempts` after
  a restart of the executor finds exactly its own attempts.
- `observe` maps the backend's own states onto the ledger's `JobState`; it never returns a
  backend's raw state except in `message`.
"""

from __future__ import annotations

import abc
import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field

from starforge.executor.v1 import executor_service_pb2 as ex_pb
from starforge.executor.v1 import launch_request_pb2 as lr_pb
from starforge.job.v1 import job_state_pb2 as st

from common import labels

# The label names live in common/ (the control plane puts them into LaunchRequests too); the
# executor kinds take them from here.
LABEL_JOB = labels.LABEL_JOB
LABEL_ATTEMPT = labels.LABEL_ATTEMPT
LABEL_MANAGED = labels.LABEL_MANAGED
MANAGED_BY = labels.MANAGED_BY


def out_key(request: lr_pb.LaunchRequest) -> str:
    """The key of the attempt's persistent FORGE_OUT_DIR (a pipeline stage shares its run's)."""
    return request.out_key or request.job_id


def labels_for(request: lr_pb.LaunchRequest) -> dict[str, str]:
    """Labels for every backend object of an attempt (request labels + the three ids)."""
    result = dict(request.labels)
    result[LABEL_JOB] = request.job_id
    result[LABEL_ATTEMPT] = request.attempt_id
    result[LABEL_MANAGED] = MANAGED_BY
    return result


@dataclass(frozen=True)
class LaunchResult:
    """What `Executor.launch` returns."""

    backend_handle: str
    already_launched: bool = False
    node: str = ""
    image_digest: str = ""
    out_dir: str = ""


@dataclass(frozen=True)
class Observation:
    """An attempt as the backend sees it, mapped onto the ledger's states.

    `state` is one of PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED (JobState values), or
    UNSPECIFIED with `not_found=True` when the backend has no trace of it.
    """

    attempt_id: str
    state: int = st.JOB_STATE_UNSPECIFIED
    not_found: bool = False
    exit_code: int | None = None
    message: str = ""
    log_tail: Sequence[str] = ()
    backend_handle: str = ""
    node: str = ""
    start_time: dt.datetime | None = None
    end_time: dt.datetime | None = None
    failure_class: int = st.FAILURE_CLASS_UNSPECIFIED

    @classmethod
    def missing(cls, attempt_id: str) -> Observation:
        return cls(attempt_id=attempt_id, not_found=True, message="no such attempt on this backend")


@dataclass(frozen=True)
class SeriesInventory:
    """GPUs of one series this executor can run on."""

    series: str
    nodes: int
    gpus_per_node: int
    free_gpus: int


@dataclass(frozen=True)
class Capabilities:
    """What `Executor.describe` returns."""

    kind: str
    runtime: str
    capabilities: frozenset[int] = frozenset()  # ExecutorCapability values
    inventory: Sequence[SeriesInventory] = field(default_factory=tuple)
    version: str = ""


class Executor(abc.ABC):
    """One executor kind. Implementations must be safe for concurrent calls from one event loop."""

    kind: str = ""

    @abc.abstractmethod
    async def describe(self) -> Capabilities:
        """Kind, runtime, optional capabilities and inventory. Raise `Unavailable` if the backend
        cannot be reached."""

    @abc.abstractmethod
    async def launch(self, request: lr_pb.LaunchRequest) -> LaunchResult:
        """Start the attempt and return once the backend accepted it (not when it runs).

        Idempotent per `request.attempt_id`. Raise `InvalidArgument` when this executor can never
        run the request (unknown series, more GPUs than a node has, several pools without the
        MULTI_POOL capability), `ResourceExhausted` when it cannot run it now, `FailedPrecondition`
        when a capsule or workspace blob fails its digest check, `Unavailable` when the backend
        cannot be reached.
        """

    @abc.abstractmethod
    async def observe(self, attempt_ids: Sequence[str]) -> list[Observation]:
        """Observations in the order asked; unknown attempts come back `Observation.missing`."""

    @abc.abstractmethod
    async def stop(self, attempt_id: str, grace_seconds: float) -> bool:
        """Stop the attempt: SIGTERM (or the backend's cancel), then SIGKILL after `grace_seconds`.

        Return True if it was running, False if it was already gone or never existed. Must not
        raise for a missing attempt.
        """

    @abc.abstractmethod
    async def cleanup(self, attempt_id: str) -> int:
        """Remove the attempt's backend objects and scratch space, keeping FORGE_OUT_DIR.

        Return the number of objects removed (0 when nothing was left). Raise
        `FailedPrecondition` if the attempt still runs.
        """

    @abc.abstractmethod
    async def list_attempts(self) -> list[Observation]:
        """Every attempt this executor finds on its backend by its labels."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release clients and background tasks. Optional."""


def capabilities_to_proto(caps: Capabilities) -> ex_pb.DescribeCapabilitiesResponse:
    """Domain -> proto for DescribeCapabilities."""
    return ex_pb.DescribeCapabilitiesResponse(
        kind=caps.kind,
        runtime=caps.runtime,
        capabilities=sorted(caps.capabilities),  # type: ignore[arg-type]
        inventory=[
            ex_pb.SeriesInventory(series=i.series, nodes=i.nodes, gpus_per_node=i.gpus_per_node, free_gpus=i.free_gpus)
            for i in caps.inventory
        ],
        version=caps.version,
    )


def observation_to_proto(o: Observation) -> ex_pb.Observation:
    """Domain -> proto for Observe and ListAttempts."""
    msg = ex_pb.Observation(
        attempt_id=o.attempt_id,
        state=o.state,  # type: ignore[arg-type]
        not_found=o.not_found,
        message=o.message,
        log_tail=list(o.log_tail)[-50:],
        backend_handle=o.backend_handle,
        node=o.node,
        failure_class=o.failure_class,  # type: ignore[arg-type]
    )
    if o.exit_code is not None:
        msg.exit_code = o.exit_code
    if o.start_time is not None:
        msg.start_time.FromDatetime(o.start_time)
    if o.end_time is not None:
        msg.end_time.FromDatetime(o.end_time)
    return msg
