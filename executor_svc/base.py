"""The Executor contract every kind implements (local, agent, kuberay, slurm).

Modelled on dstack's `Compute`: a small required core with the contract in docstrings, and
optional capabilities declared rather than assumed. The gRPC servicer (`executor_svc.service`)
only adapts protos to these calls.

Shared semantics (tests/integration/executors/test_conformance.py checks them on every kind, against
its real backend; docs/executors.md says which restart each kind's test can make):
- `launch` is idempotent per attempt id: launching an attempt that exists returns its handle with
  `already_launched=True` and starts nothing.
- `stop` never fails because the attempt is already gone or never existed.
- `cleanup` frees every backend object and scratch space of the attempt, but never FORGE_OUT_DIR.
- every backend object carries the labels in `labels_for(request)`, so that `list_attempts` after
  a restart of the executor finds exactly its own attempts.
- `observe` maps the backend's own states onto the ledger's `JobState`; it never returns a
  backend's raw state except in `message`.

Optional capability ARTIFACTS (`list_artifacts`, `read_artifact`): serve what a job left in its
FORGE_OUT_DIR. The job's code wrote that directory, so nothing in it is trusted: paths are
relative without "." or "..", no link is ever followed (links are listed as links), only regular
files are read, and listings are bounded (`executor_svc.out_files` does all of this for kinds
whose out dirs are on a file system the executor can open).
"""

from __future__ import annotations

import abc
import datetime as dt
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from starforge_api.executor.v1 import executor_service_pb2 as ex_pb
from starforge_api.executor.v1 import launch_request_pb2 as lr_pb
from starforge_api.job.v1 import artifact_pb2
from starforge_api.job.v1 import job_state_pb2 as st

from common import errors, labels, runtimes
from executor_svc.attempt_dirs import check_id
from executor_svc.out_files import Entry, Page

# The label names live in common/ (the control plane puts them into LaunchRequests too); the
# executor kinds take them from here.
LABEL_JOB = labels.LABEL_JOB
LABEL_ATTEMPT = labels.LABEL_ATTEMPT
LABEL_MANAGED = labels.LABEL_MANAGED
MANAGED_BY = labels.MANAGED_BY
# Which executor instance owns a backend object: its configured name (kuberay, slurm) or a hash
# of its state dir (local docker). Two executors on one backend never claim each other's objects.
LABEL_EXECUTOR = "starforge.dev/executor"

# Runtime names live in common/ (the control plane reads them too); the kinds take them from here.
RUNTIME_PROCESS = runtimes.RUNTIME_PROCESS
RUNTIME_DOCKER = runtimes.RUNTIME_DOCKER
RUNTIME_RAY = runtimes.RUNTIME_RAY
RUNTIME_HOST = runtimes.RUNTIME_HOST
RUNTIME_ENROOT = runtimes.RUNTIME_ENROOT
RUNTIME_APPTAINER = runtimes.RUNTIME_APPTAINER


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
    # The image digest learnt once the attempt runs ("" when unknown; see executor_service.proto).
    image_digest: str = ""

    @classmethod
    def missing(cls, attempt_id: str) -> Observation:
        return cls(attempt_id=attempt_id, not_found=True, message="no such attempt on this backend")


@dataclass(frozen=True)
class OutDirRef:
    """Which FORGE_OUT_DIR an artifact call means: the attempt that ran last, its out key (the
    LaunchRequest's `out_key`, or its job id) and the node it ran on (for kinds with nodes)."""

    attempt_id: str
    out_key: str
    node: str = ""

    def checked(self) -> OutDirRef:
        """Itself when its ids are safe as directory names (an empty attempt id is allowed: a
        node's forgelet is asked by out key alone), else InvalidArgument."""
        if self.attempt_id:
            check_id(self.attempt_id, "attempt_id")
        check_id(self.out_key, "out_key")
        return self


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

    # -- optional capability ARTIFACTS ---------------------------------------------------------

    async def list_artifacts(self, ref: OutDirRef, page_size: int, page_token: str) -> Page:
        """One page of the regular files and links in `ref`'s FORGE_OUT_DIR, sorted by path,
        after `page_token` (the previous page's `next_page_token`). Links are listed with their
        target text and never followed; other file types are left out. Kinds that declare
        EXECUTOR_CAPABILITY_ARTIFACTS override this.

        Raise `InvalidArgument` for unsafe ids, page size or token, `NotFound` when there is no
        such out dir here, `FailedPrecondition` when the kind cannot serve artifacts or the out
        dir holds more entries than `out_files.MAX_ENTRIES`, `Unavailable` when the backend or
        node cannot be reached.
        """
        raise errors.FailedPrecondition(f"the {self.kind} executor cannot serve artifacts")

    async def read_artifact(self, ref: OutDirRef, path: str, offset: int) -> AsyncIterator[tuple[int, bytes, int]]:
        """Yield (offset, data, size at open) chunks of the regular file `path` of `ref`'s
        FORGE_OUT_DIR from `offset` to its end, at most `out_files.CHUNK_BYTES` each.

        Raise `InvalidArgument` for a path that is absolute, has empty, "." or ".." parts, or an
        offset beyond the size; `NotFound` when there is no such file; `FailedPrecondition` when
        the path (or a directory on the way) is a link, is not a regular file, or the kind
        cannot serve artifacts; `Unavailable` when the backend cannot be reached.
        """
        raise errors.FailedPrecondition(f"the {self.kind} executor cannot serve artifacts")
        yield 0, b"", 0  # pragma: no cover - makes this an async generator


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
        image_digest=o.image_digest,
    )
    if o.exit_code is not None:
        msg.exit_code = o.exit_code
    if o.start_time is not None:
        msg.start_time.FromDatetime(o.start_time)
    if o.end_time is not None:
        msg.end_time.FromDatetime(o.end_time)
    return msg


def entry_to_proto(e: Entry) -> artifact_pb2.Artifact:
    """Domain -> proto for ListArtifacts."""
    msg = artifact_pb2.Artifact(path=e.path, size=e.size, sha256=e.sha256)
    if e.link_target is None:
        msg.kind = artifact_pb2.ARTIFACT_KIND_FILE
    else:
        msg.kind = artifact_pb2.ARTIFACT_KIND_SYMLINK
        msg.link_target = e.link_target
    msg.modify_time.FromDatetime(e.mtime)
    return msg


def entry_from_proto(msg: artifact_pb2.Artifact) -> Entry:
    """Proto -> domain, the inverse of `entry_to_proto`."""
    mtime = dt.datetime.fromtimestamp(msg.modify_time.seconds + msg.modify_time.nanos / 1e9, dt.UTC)
    link = msg.link_target if msg.kind == artifact_pb2.ARTIFACT_KIND_SYMLINK else None
    return Entry(msg.path, msg.size, mtime, msg.sha256, link)


def page_to_proto(page: Page) -> ex_pb.ListArtifactsResponse:
    return ex_pb.ListArtifactsResponse(
        artifacts=[entry_to_proto(e) for e in page.entries], next_page_token=page.next_page_token
    )
