"""The `docker` runtime: one container per attempt on a Docker engine, through the docker SDK.

The container runs `sh /forge/capsule/bootstrap.sh` with the attempt's directories bind-mounted
(capsule and datasets read-only) at /forge/{capsule,datasets,workspace,out,scratch}, `network_mode=host` (or none; the
executor never makes bridges), docker-init as PID 1 so SIGTERM reaches the capsule and zombies are
reaped, and the image as it is on the node: images are never pulled.

Containers are named `sf-<attempt id with '.' -> '-'>` and carry the attempt labels plus this
executor's id (a hash of its state dir), the series and the GPUs it holds: that is how a
restarted executor finds them (and its GPU allocation) without any state of its own. SDK calls
block, so each runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import math
import re
from collections.abc import Callable
from typing import Any, TypeVar

import docker
import docker.errors
import requests.exceptions
from docker.types import DeviceRequest, Mount
from starforge_api.control.v1 import error_reason_pb2 as reason_pb
from starforge_api.executor.v1 import executor_service_pb2 as ex_pb
from starforge_api.executor.v1 import launch_request_pb2 as lr_pb

from common import errors
from executor_svc.base import (
    LABEL_ATTEMPT,
    LABEL_EXECUTOR,
    LABEL_JOB,
    LABEL_MANAGED,
    MANAGED_BY,
    RUNTIME_DOCKER,
    labels_for,
)
from executor_svc.capsule_env import CapsulePaths, capsule_env, write_token_file
from executor_svc.local.config import DockerConfig
from executor_svc.local.records import AttemptRecord, Layout
from executor_svc.local.runtime import (
    LOG_TAIL_LINES,
    Discovered,
    Runtime,
    RuntimeState,
    StartSpec,
    read_log_tail,
)

log = logging.getLogger("starforge.executor.local.docker")
T = TypeVar("T")

LABEL_SERIES = "starforge.dev/series"
LABEL_GPUS = "starforge.dev/gpus"
LABEL_NUMBER = "starforge.dev/attempt-number"
IN_CONTAINER = CapsulePaths(
    capsule="/forge/capsule",
    workspace="/forge/workspace",
    out="/forge/out",
    scratch="/forge/scratch",
    datasets="/forge/datasets",
)
_DOCKER_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$")


def container_name(attempt_id: str) -> str:
    return "sf-" + attempt_id.replace(".", "-")


def _time(value: str | None) -> dt.datetime | None:
    """Docker's RFC 3339 time (nanoseconds) as a datetime; None for its zero time."""
    m = _DOCKER_TIME.match(value or "")
    if not m or m.group(1).startswith("0001-"):
        return None
    frac = (m.group(2) or ".0")[:7]
    zone = "+00:00" if m.group(3) == "Z" else m.group(3)
    return dt.datetime.fromisoformat(m.group(1) + frac + zone)


class DockerRuntime(Runtime):
    """Runs capsules as containers (see module docstring)."""

    name = RUNTIME_DOCKER
    capabilities = frozenset({ex_pb.EXECUTOR_CAPABILITY_IMAGES})

    @property
    def shares_cache(self) -> bool:
        return True  # capsule and datasets are read-only bind mounts

    def __init__(self, cfg: DockerConfig, layout: Layout, executor_id: str, node: str) -> None:
        self._cfg = cfg
        self._layout = layout
        self._executor_id = executor_id
        self._node = node
        self._client: docker.DockerClient | None = None

    @property
    def address(self) -> str:
        return self._cfg.base_url or "DOCKER_HOST or the default socket"

    def _connect(self) -> docker.DockerClient:
        if self._client is None:
            kwargs: dict[str, Any] = {"timeout": int(self._cfg.api_timeout_seconds), "max_pool_size": 16}
            if self._cfg.base_url:
                self._client = docker.DockerClient(base_url=self._cfg.base_url, **kwargs)
            else:
                self._client = docker.from_env(**kwargs)
        return self._client

    async def _call(self, fn: Callable[[docker.DockerClient], T]) -> T:
        """Run `fn(client)` in a thread; an unreachable engine becomes Unavailable."""

        def run() -> T:
            return fn(self._connect())

        try:
            return await asyncio.to_thread(run)
        except docker.errors.APIError:
            raise  # the engine answered (not found, conflict, bad request): callers decide
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise errors.Unavailable(f"cannot reach the Docker engine at {self.address}: {exc}") from None

    async def ping(self) -> None:
        await self._call(lambda c: c.ping())

    async def check_image(self, request: lr_pb.LaunchRequest) -> str:
        if not request.image:
            raise errors.InvalidArgument(
                "the docker runtime needs an image and the request has none",
                field_violations=(errors.FieldViolation("image", "empty"),),
            )
        try:
            image = await self._call(lambda c: c.images.get(request.image))
        except docker.errors.ImageNotFound:
            raise errors.FailedPrecondition(
                f"image {request.image} is not present on this node (pull it or choose another)",
                reason=reason_pb.ERROR_REASON_UNSPECIFIED,
                metadata={"failure_class": "IMAGE", "image": request.image},
                precondition_violations=(
                    errors.PreconditionViolation("IMAGE", request.image, "not present on the node"),
                ),
            ) from None
        repo_digests = image.attrs.get("RepoDigests") or []
        return str(repo_digests[0].split("@", 1)[1]) if repo_digests else str(image.id)

    def _labels(self, spec: StartSpec) -> dict[str, str]:
        labels = labels_for(spec.request)
        labels[LABEL_EXECUTOR] = self._executor_id
        labels[LABEL_SERIES] = spec.series.series
        labels[LABEL_GPUS] = ",".join(str(g) for g in spec.gpus)
        labels[LABEL_NUMBER] = str(spec.request.attempt_number)
        return labels

    async def start(self, spec: StartSpec, record: AttemptRecord) -> None:
        dirs = spec.dirs
        extra: dict[str, str] = {}
        device_requests = []
        if spec.gpus and spec.series.real_gpus:
            device_requests.append(DeviceRequest(device_ids=[str(g) for g in spec.gpus], capabilities=[["gpu"]]))
        else:
            # No devices to hand over (CPU series, or configured GPUs that are not real): the
            # assignment is still visible to the job and recorded in the labels.
            extra["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in spec.gpus)
        env = capsule_env(spec.request, IN_CONTAINER, stop_grace_seconds=spec.stop_grace_seconds, extra=extra)
        # The container sees it at /forge/scratch; not in `environment`, which any process in
        # the container could read from /proc/1/environ (docker-init's).
        write_token_file(spec.request, dirs.scratch)
        mounts = [
            # Capsule and dataset files may be hard links into the node's blob cache, which other
            # jobs link too: read-only mounts are what keeps a job from writing them.
            Mount(IN_CONTAINER.capsule, str(dirs.capsule), type="bind", read_only=True),
            Mount(IN_CONTAINER.datasets, str(dirs.datasets), type="bind", read_only=True),
            Mount(IN_CONTAINER.workspace, str(dirs.workspace), type="bind"),
            Mount(IN_CONTAINER.out, str(spec.out_dir), type="bind"),
            Mount(IN_CONTAINER.scratch, str(dirs.scratch), type="bind"),
            *(Mount(m.target, m.source, type="bind", read_only=m.read_only) for m in self._cfg.extra_mounts),
        ]
        name = container_name(spec.request.attempt_id)

        def create_and_start(c: docker.DockerClient) -> Any:
            container = c.containers.create(
                spec.request.image,
                command=["sh", f"{IN_CONTAINER.capsule}/bootstrap.sh"],
                name=name,
                labels=self._labels(spec),
                environment=env,
                mounts=mounts,
                network_mode=self._cfg.network_mode,
                working_dir=IN_CONTAINER.workspace,
                device_requests=device_requests or None,
                init=True,
                stop_signal="SIGTERM",
            )
            try:
                container.start()
            except docker.errors.APIError:
                container.remove(force=True)
                raise
            return container

        try:
            container = await self._call(create_and_start)
        except docker.errors.APIError as exc:
            raise errors.FailedPrecondition(
                f"the Docker engine refused to start {name}: {exc.explanation or exc}",
                reason=reason_pb.ERROR_REASON_UNSPECIFIED,
                metadata={"failure_class": "INFRA"},
            ) from None
        record.handle = str(container.id)

    async def _get(self, record: AttemptRecord) -> Any | None:
        ref = record.handle or container_name(record.attempt_id)
        try:
            return await self._call(lambda c: c.containers.get(ref))
        except docker.errors.NotFound:
            return None

    async def inspect(self, record: AttemptRecord) -> RuntimeState:
        container = await self._get(record)
        if container is None:
            return RuntimeState(exists=False, raw="container not found")
        state = container.attrs.get("State", {})
        status = str(state.get("Status", ""))
        started, ended = _time(state.get("StartedAt")), _time(state.get("FinishedAt"))
        if status in ("running", "paused", "restarting"):
            return RuntimeState(exists=True, running=True, started_at=started, raw=status)
        if status == "created":
            return RuntimeState(exists=True, pending=True, raw=status)
        code = int(state.get("ExitCode", -1))
        detail = f" ({state['Error']})" if state.get("Error") else ""
        return RuntimeState(
            exists=True,
            exit_code=code,
            oom_killed=bool(state.get("OOMKilled")),
            started_at=started,
            ended_at=ended,
            raw=f"{status} ({code}){detail}",
        )

    async def log_tail(self, record: AttemptRecord, lines: int = LOG_TAIL_LINES) -> list[str]:
        container = await self._get(record)
        if container is None:
            return await asyncio.to_thread(read_log_tail, self._layout.attempt(record.attempt_id).log, lines)
        data = await self._call(lambda c: container.logs(stdout=True, stderr=True, tail=lines))
        return bytes(data).decode("utf-8", errors="replace").splitlines()[-lines:]

    async def stop(self, record: AttemptRecord, grace_seconds: float) -> None:
        container = await self._get(record)
        if container is None:
            return
        try:
            await self._call(lambda c: container.stop(timeout=math.ceil(grace_seconds)))
        except docker.errors.NotFound:
            return

    async def remove(self, record: AttemptRecord) -> int:
        container = await self._get(record)
        if container is None:
            return 0
        dirs = self._layout.attempt(record.attempt_id)

        def save_logs_and_remove(c: docker.DockerClient) -> None:
            # bootstrap.log keeps what the container printed once the container is gone.
            dirs.log.write_bytes(container.logs(stdout=True, stderr=True))
            container.remove(v=True)

        try:
            await self._call(save_logs_and_remove)
        except docker.errors.NotFound:
            return 0
        return 1

    def _record_from(self, container: Any) -> AttemptRecord:
        labels = container.labels
        attempt_id = labels[LABEL_ATTEMPT]
        job_id = labels.get(LABEL_JOB, "")
        return AttemptRecord(
            attempt_id=attempt_id,
            job_id=job_id,
            attempt_number=int(labels.get(LABEL_NUMBER, "0") or 0),
            runtime=self.name,
            series=labels.get(LABEL_SERIES, ""),
            gpus=[int(g) for g in labels.get(LABEL_GPUS, "").split(",") if g],
            node=self._node,
            out_dir=str(self._layout.out_dir(job_id)) if job_id else "",
            created_at=(_time(container.attrs.get("Created")) or dt.datetime.now(dt.UTC)).timestamp(),
            handle=str(container.id),
            image=str(container.attrs.get("Config", {}).get("Image", "")),
            image_digest=str(container.attrs.get("Image", "")),
        )

    async def find(self, attempt_id: str) -> AttemptRecord | None:
        try:
            container = await self._call(lambda c: c.containers.get(container_name(attempt_id)))
        except docker.errors.NotFound:
            return None
        if container.labels.get(LABEL_EXECUTOR) != self._executor_id:
            return None
        return self._record_from(container)

    async def discover(self) -> list[Discovered]:
        filters = {"label": [f"{LABEL_MANAGED}={MANAGED_BY}", f"{LABEL_EXECUTOR}={self._executor_id}"]}
        found = await self._call(lambda c: c.containers.list(all=True, filters=filters, ignore_removed=True))
        out = []
        for container in found:
            record = self._record_from(container)
            out.append(Discovered(record.attempt_id, record.series, tuple(record.gpus), record))
        return out

    async def close(self) -> None:
        if self._client is not None:
            await asyncio.to_thread(self._client.close)
            self._client = None
