"""LocalExecutor: runs attempts on this one node, as processes or containers (see config.py).

What is the same for both runtimes lives here: request checks, the per-attempt record that makes
Launch idempotent, GPU allocation, blob materialisation, and the mapping of what a runtime sees
onto the ledger's states. Launch holds one lock from GPU allocation to the start of the process
or container, so two concurrent launches can never be handed the same GPU; materialising the
files happens before, outside the lock, so slow downloads do not serialise launches.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import logging
import shutil
import socket
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from starforge_api.executor.v1 import executor_service_pb2 as ex_pb
from starforge_api.executor.v1 import launch_request_pb2 as lr_pb
from starforge_api.job.v1 import job_spec_pb2 as spec_pb
from starforge_api.job.v1 import job_state_pb2 as st

from common import __version__, dir_spread, errors
from executor_svc import bundle, out_files
from executor_svc.attempt_dirs import check_id
from executor_svc.base import (
    RUNTIME_DOCKER,
    Capabilities,
    Executor,
    LaunchResult,
    Observation,
    OutDirRef,
    SeriesInventory,
    out_key,
)
from executor_svc.capsule_env import stop_grace
from executor_svc.local.config import LocalConfig
from executor_svc.local.docker_runtime import DockerRuntime
from executor_svc.local.inventory import GpuPool
from executor_svc.local.process_runtime import ProcessRuntime
from executor_svc.local.records import AttemptDirs, AttemptRecord, Layout
from executor_svc.local.runtime import Runtime, RuntimeState, StartSpec
from executor_svc.plumbing import states
from executor_svc.plumbing.blob_channels import BlobChannels
from executor_svc.plumbing.failures import PRECHECK_EXIT_CODES, shows_oom
from executor_svc.plumbing.locks import AttemptLocks
from executor_svc.plumbing.materialize import materialize_attempt, remove_attempt_root
from executor_svc.plumbing.states import LedgerState, look_up

log = logging.getLogger("starforge.executor.local")

VERSION = __version__


# What a runtime sees, reduced to a phase (_phase) -> the ledger's state; FAILED is classed in _map.
LOCAL_STATES: dict[str, LedgerState] = {
    "running": states.RUNNING,
    "created": states.PENDING,
    "stopped": states.STOPPED,  # ended after a Stop, whatever its exit code
    "exited 0": states.SUCCEEDED,
    "exited": states.failed(st.FAILURE_CLASS_UNSPECIFIED),
}


def _phase(record: AttemptRecord, state: RuntimeState) -> str:
    if state.running:
        return "running"
    if state.pending:
        return "created"
    if record.stop_requested_at is not None:
        return "stopped"
    return "exited 0" if state.exit_code == 0 else "exited"


def executor_id(state_dir: str) -> str:
    """Stable id of an executor instance: a hash of its state dir (labels name their owner)."""
    return hashlib.sha256(state_dir.encode()).hexdigest()[:16]


def make_runtime(cfg: LocalConfig, layout: Layout, node: str) -> Runtime:
    if cfg.runtime == RUNTIME_DOCKER:
        return DockerRuntime(cfg.docker, layout, executor_id(str(layout.state_dir)), node)
    warm = Path(cfg.warm_capsule) if cfg.warm_capsule else None
    return ProcessRuntime(layout, cfg.job_uid_range, cfg.preforked_runner, warm)


class LocalExecutor(Executor):
    """The `local` kind. Build it with `await LocalExecutor.create(cfg)`."""

    kind = "local"

    def __init__(self, cfg: LocalConfig, runtime: Runtime | None = None) -> None:
        self.cfg = cfg
        self.layout = Layout(cfg.state_dir.resolve())
        self.node = cfg.node_name or socket.gethostname()
        self.runtime = runtime or make_runtime(cfg, self.layout, self.node)
        self.pool = GpuPool(cfg.inventory)
        self._lister = out_files.Lister()
        self._launch_lock = asyncio.Lock()
        self._attempts = AttemptLocks()
        self._warming: asyncio.Future[None] | None = None
        self._blob_channels = BlobChannels()

    @classmethod
    async def create(cls, cfg: LocalConfig) -> LocalExecutor:
        """An executor that found its running attempts again (GPUs they hold stay held), and
        warms its runtime in the background (`Runtime.warm`) while it starts serving."""
        ex = cls(cfg)
        await ex.recover()
        ex._warming = asyncio.ensure_future(ex._warm())
        return ex

    async def _warm(self) -> None:
        try:
            await self.runtime.warm()
        except Exception:  # a warm-up is an optimisation: the attempts do it themselves otherwise
            log.exception("warming the %s runtime failed; the first attempts prepare it themselves", self.runtime.name)

    async def recover(self) -> None:
        for d in (self.layout.attempts_dir, self.layout.cache_dir, self.layout.state_dir / "out"):
            d.mkdir(parents=True, exist_ok=True)
        # each attempt's tree in a block group of its own (not out/: a job's folder is one inode,
        # kept, and placing a top folder costs ext4 a search of every group)
        dir_spread.spread_subfolders(self.layout.attempts_dir)
        await self.runtime.prepare_host()
        await asyncio.to_thread(bundle.clear_tmp, self.layout.cache_dir)
        held = 0
        for attempt_id in self.layout.attempt_ids():
            record = AttemptRecord.load(self.layout.attempt(attempt_id).record)
            if record and record.cleaned_at is None and (await self.runtime.inspect(record)).active:
                self.pool.hold(attempt_id, record.series, record.gpus)
                held += 1
        for found in await self.runtime.discover():
            if found.attempt_id not in self.pool.holders() and (await self.runtime.inspect(found.record)).active:
                self.pool.hold(found.attempt_id, found.series, found.gpus)
                held += 1
        log.info(
            "local executor ready: runtime %s, state dir %s, %d running attempts found",
            self.runtime.name,
            self.layout.state_dir,
            held,
        )

    async def _record(self, attempt_id: str) -> AttemptRecord | None:
        """The attempt's record: on disk, else rebuilt from the backend (docker labels)."""
        try:
            dirs = self.layout.attempt(attempt_id)
        except errors.InvalidArgument:
            return None
        record = await asyncio.to_thread(AttemptRecord.load, dirs.record)
        if record is None:
            record = await self.runtime.find(attempt_id)
        if record is None or attempt_id in self._attempts.launching or record.handle:
            return record
        return await self._unless_interrupted(record, dirs)

    async def _unless_interrupted(self, record: AttemptRecord, dirs: AttemptDirs) -> AttemptRecord | None:
        """`record` has no backend handle and no launch of this process is under way: the executor
        died between saving the record and finishing the start. If the backend object never started
        (none, or a created container), nothing of the attempt ran: remove what is left and answer
        None, so the control plane's re-sent launch starts it afresh (reported as it is, it would
        read PENDING or FAILED forever). A start that did happen is kept."""
        state = await self.runtime.inspect(record)
        if state.running or state.started_at is not None:
            return record
        log.info("removing %s: its launch was interrupted before it started", record.attempt_id)
        if state.exists:
            await self.runtime.remove(record)
        self.pool.release(record.attempt_id)
        await asyncio.to_thread(dirs.record.unlink, True)
        return None

    async def _still_running(self, attempt_id: str) -> bool:
        record = await self._record(attempt_id)
        return record is not None and (await self.runtime.inspect(record)).active

    # -- describe ---------------------------------------------------------------------------

    async def describe(self) -> Capabilities:
        await self.runtime.ping()
        async with self._launch_lock:
            await self.pool.release_ended(self._still_running)
        caps = {ex_pb.EXECUTOR_CAPABILITY_PAUSE, ex_pb.EXECUTOR_CAPABILITY_ARTIFACTS, *self.runtime.capabilities}
        if any(s.indices() for s in self.cfg.inventory):
            caps.add(ex_pb.EXECUTOR_CAPABILITY_GPUS)
        return Capabilities(
            kind=self.kind,
            runtime=self.runtime.name,
            capabilities=frozenset(caps),
            inventory=tuple(
                SeriesInventory(s.series, 1, len(s.indices()), len(self.pool.free(s.series)))
                for s in self.cfg.inventory
            ),
            version=VERSION,
        )

    # -- launch -----------------------------------------------------------------------------

    async def launch(self, request: lr_pb.LaunchRequest, gpus: Sequence[int] | None = None) -> LaunchResult:
        """See `Executor.launch`. `gpus`: exact GPU indices chosen by a placer elsewhere (forgelet)."""
        pool = self.pool.check(request.pools)
        dirs = self.layout.attempt(request.attempt_id)
        out_dir = self.layout.out_dir(check_id(out_key(request), "out_key"))
        async with self._attempts.lock(request.attempt_id):
            existing = await self._record(request.attempt_id)
            if existing is not None:
                return self._result(existing, already_launched=True)
            image_digest = await self.runtime.check_image(request)
            async with self._launch_lock:  # fail fast, before downloading anything
                await self.pool.ensure_room(pool.series, pool.gpus_per_node, self._still_running)
            with self._attempts.launching_now(request.attempt_id):
                try:
                    await self._materialize(request, dirs, out_dir)
                    async with self._launch_lock:
                        record = await self._allocate_and_start(request, pool, dirs, out_dir, image_digest, gpus)
                except BaseException:
                    if not dirs.record.exists():
                        await remove_attempt_root(dirs)
                    raise
        log.info(
            "launched %s (%s, %s GPUs %s) as %s",
            request.attempt_id,
            self.runtime.name,
            pool.series,
            record.gpus,
            record.handle,
        )
        return self._result(record, already_launched=False)

    async def _materialize(self, request: lr_pb.LaunchRequest, dirs: AttemptDirs, out_dir: Path) -> None:
        await materialize_attempt(
            request,
            dirs,
            out_dir,
            self.layout.cache_dir,
            concurrency=self.cfg.fetch_concurrency,
            share_cache=self.runtime.shares_cache,
            channels=self._blob_channels,
        )

    async def _allocate_and_start(
        self,
        request: lr_pb.LaunchRequest,
        pool: spec_pb.Pool,
        dirs: AttemptDirs,
        out_dir: Path,
        image_digest: str,
        want: Sequence[int] | None = None,
    ) -> AttemptRecord:
        """Take GPUs and start; call under the launch lock so no GPU is handed out twice."""
        gpus = await self.pool.allocate(
            request.attempt_id, pool.series, pool.gpus_per_node, self._still_running, want=want
        )
        record = AttemptRecord(
            attempt_id=request.attempt_id,
            job_id=request.job_id,
            attempt_number=request.attempt_number,
            runtime=self.runtime.name,
            series=pool.series,
            gpus=gpus,
            node=self.node,
            out_dir=str(out_dir),
            created_at=time.time(),
            image=request.image,
            image_digest=image_digest,
        )
        # Saved before the start: a crash in between leaves an attempt that reads as "never
        # started" rather than one that could be launched twice.
        record.save(dirs.record)
        spec = StartSpec(
            request=request,
            dirs=dirs,
            out_dir=out_dir,
            series=self.pool.series(pool.series),
            gpus=gpus,
            stop_grace_seconds=stop_grace(request, self.cfg.default_stop_grace_seconds),
        )
        try:
            # bootstrap.sh checks every other file; the executor checks bootstrap.sh, last thing.
            await asyncio.to_thread(bundle.verify_bootstrap, request, dirs.capsule)
            await self.runtime.start(spec, record)
        except BaseException:
            self.pool.release(request.attempt_id)
            dirs.record.unlink(missing_ok=True)
            raise
        record.save(dirs.record)
        return record

    def _result(self, record: AttemptRecord, *, already_launched: bool) -> LaunchResult:
        return LaunchResult(
            backend_handle=record.handle,
            already_launched=already_launched,
            node=record.node,
            image_digest=record.image_digest,
            out_dir=record.out_dir,
        )

    # -- observe ----------------------------------------------------------------------------

    async def observe(self, attempt_ids: Sequence[str]) -> list[Observation]:
        return list(await asyncio.gather(*(self._observe(a) for a in attempt_ids)))

    async def _observe(self, attempt_id: str) -> Observation:
        if attempt_id in self._attempts.launching:
            return Observation(attempt_id, state=st.JOB_STATE_PENDING, message="launching", node=self.node)
        record = await self._record(attempt_id)
        if record is None:
            return Observation.missing(attempt_id)
        if record.final is not None:
            return self._from_final(record, await self.runtime.log_tail(record))
        state = await self.runtime.inspect(record)
        if not state.active:
            self.pool.release(attempt_id)
        return self._map(record, state, await self.runtime.log_tail(record))

    def _map(self, record: AttemptRecord, state: RuntimeState, tail: list[str]) -> Observation:
        """What the runtime sees -> the ledger's state, the same for every runtime."""
        entry = look_up(LOCAL_STATES, _phase(record, state), "local runtime phase")
        job_state, failure = entry.state, entry.failure_class
        message = state.raw
        if job_state == st.JOB_STATE_FAILED:
            if state.exit_code is None:
                failure = st.FAILURE_CLASS_INFRA
                message = "never started" if not record.handle else f"{state.raw}; the attempt vanished"
            elif state.oom_killed or shows_oom(tail):
                failure = st.FAILURE_CLASS_OUT_OF_MEMORY
                message = f"{state.raw}; out of memory"
            elif state.exit_code in PRECHECK_EXIT_CODES:
                failure = st.FAILURE_CLASS_PRECHECK
                message = f"{state.raw}; a check before the training command failed"
        ended = state.ended_at
        if ended is None and job_state == st.JOB_STATE_STOPPED and record.stop_requested_at:
            ended = dt.datetime.fromtimestamp(record.stop_requested_at, dt.UTC)
        return Observation(
            attempt_id=record.attempt_id,
            state=job_state,
            exit_code=state.exit_code,
            message=message,
            log_tail=tail,
            backend_handle=record.handle,
            node=record.node,
            start_time=state.started_at,
            end_time=ended,
            failure_class=failure,
        )

    def _from_final(self, record: AttemptRecord, tail: list[str]) -> Observation:
        f = record.final or {}

        def when(key: str) -> dt.datetime | None:
            v = f.get(key)
            return None if v is None else dt.datetime.fromtimestamp(float(v), dt.UTC)

        return Observation(
            attempt_id=record.attempt_id,
            state=int(f["state"]),
            exit_code=f.get("exit_code"),
            message=str(f.get("message", "")) + " (cleaned up)",
            log_tail=tail,
            backend_handle=record.handle,
            node=record.node,
            start_time=when("start_time"),
            end_time=when("end_time"),
            failure_class=int(f.get("failure_class", 0)),
        )

    # -- stop / cleanup / list --------------------------------------------------------------

    async def stop(self, attempt_id: str, grace_seconds: float) -> bool:
        async with self._attempts.lock(attempt_id):
            record = await self._record(attempt_id)
            if record is None or record.final is not None:
                return False
            if not (await self.runtime.inspect(record)).active:
                return False
            record.stop_requested_at = time.time()
            record.save(self.layout.attempt(attempt_id).record)
            await self.runtime.stop(record, grace_seconds)
            self.pool.release(attempt_id)
        log.info("stopped %s", attempt_id)
        return True

    async def cleanup(self, attempt_id: str) -> int:
        async with self._attempts.lock(attempt_id):
            record = await self._record(attempt_id)
            if record is None:
                return 0
            dirs = self.layout.attempt(attempt_id)
            if record.final is None:
                state = await self.runtime.inspect(record)
                if state.active:
                    raise errors.FailedPrecondition(
                        f"attempt {attempt_id} still runs; stop it before cleaning it up",
                        precondition_violations=(
                            errors.PreconditionViolation("STATE", attempt_id, "attempt is running"),
                        ),
                    )
                obs = self._map(record, state, await self.runtime.log_tail(record))
                record.final = {
                    "state": obs.state,
                    "exit_code": obs.exit_code,
                    "message": obs.message,
                    "failure_class": obs.failure_class,
                    "start_time": obs.start_time.timestamp() if obs.start_time else None,
                    "end_time": obs.end_time.timestamp() if obs.end_time else None,
                }
            record.save(dirs.record)
            removed = await self.runtime.remove(record)
            for d in dirs.removable():
                if d.exists():
                    await asyncio.to_thread(shutil.rmtree, d)
                    removed += 1
            if record.cleaned_at is None:
                record.cleaned_at = time.time()
                record.save(dirs.record)
            self.pool.release(attempt_id)
        if removed:
            log.info("cleaned up %s (%d objects)", attempt_id, removed)
        return removed

    # -- artifacts (EXECUTOR_CAPABILITY_ARTIFACTS) --------------------------------------------

    async def list_artifacts(self, ref: OutDirRef, page_size: int, page_token: str) -> out_files.Page:
        root = self.layout.out_dir(ref.out_key)
        return await asyncio.to_thread(self._lister.page, root, page_size, page_token)

    async def read_artifact(self, ref: OutDirRef, path: str, offset: int) -> AsyncIterator[tuple[int, bytes, int]]:
        async for chunk in out_files.stream_file(self.layout.out_dir(ref.out_key), path, offset):
            yield chunk

    async def list_attempts(self) -> list[Observation]:
        ids = set(await asyncio.to_thread(self.layout.attempt_ids))
        ids.update(found.attempt_id for found in await self.runtime.discover())
        return await self.observe(sorted(ids))

    async def close(self) -> None:
        if self._warming is not None and not self._warming.done():
            self._warming.cancel()
            await asyncio.gather(self._warming, return_exceptions=True)
        await self._blob_channels.close()
        await self.runtime.close()
