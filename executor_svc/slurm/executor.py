"""SlurmExecutor: attempts as Slurm batch jobs, submitted through slurmrestd.

Launch stages the capsule and workspace on the shared file system (staging.py), builds the
batch script (script.py) and submits one job, or a heterogeneous job with one component per pool;
observe maps slurmctld's record (or, once it forgot the job, the script's outcome marker) onto
the ledger's states (observations.py); stop is Slurm's cancel; cleanup removes the staged files
but never FORGE_OUT_DIR. Every job carries the attempt's labels in its comment, so a restarted
executor finds its jobs by label as well as by its records in the staging dir.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import TypeVar

from starforge_api.executor.v1 import executor_service_pb2 as ex_pb
from starforge_api.executor.v1 import launch_request_pb2 as lr_pb
from starforge_api.job.v1 import job_state_pb2 as st

from common import __version__, errors
from executor_svc import bundle, out_files
from executor_svc.attempt_dirs import check_id
from executor_svc.base import (
    LABEL_ATTEMPT,
    LABEL_EXECUTOR,
    LABEL_MANAGED,
    MANAGED_BY,
    Capabilities,
    Executor,
    LaunchResult,
    Observation,
    OutDirRef,
    SeriesInventory,
    labels_for,
    out_key,
)
from executor_svc.capsule_env import write_token_file
from executor_svc.plumbing.blob_channels import BlobChannels
from executor_svc.plumbing.locks import AttemptLocks
from executor_svc.plumbing.materialize import materialize_attempt, remove_attempt_root
from executor_svc.slurm import observations as obs_map
from executor_svc.slurm.client import SlurmClient
from executor_svc.slurm.config import SeriesConfig, SlurmConfig
from executor_svc.slurm.images import image_digest
from executor_svc.slurm.models import BatchJob, JobComponent, SlurmJob
from executor_svc.slurm.plan import container_for, plan_components, ray_spec, split_environment
from executor_svc.slurm.script import Component, Container, ScriptSpec, build_script
from executor_svc.slurm.staging import (
    AttemptDirs,
    AttemptRecord,
    Layout,
    hand_over,
    read_log_tail,
    read_outcome,
    read_started,
    secure_roots,
)
from executor_svc.slurm.states import job_ledger_state
from executor_svc.slurm.tenants import unix_user
from executor_svc.slurm.tokens import TokenSource

log = logging.getLogger("starforge.executor.slurm")
T = TypeVar("T")

VERSION = __version__
# slurmctld's state_reason of a job submitted held.
HELD_REASON = "JobHeldUser"
# Stop: seconds beyond the grace for the runner to report and exit before the cancel; poll period.
STOP_MARGIN_SECONDS = 3.0
STOP_POLL_SECONDS = 0.5


def _held(job: SlurmJob) -> bool:
    """Whether the job, or any component of a heterogeneous job, is still held."""
    return any(part.state_reason == HELD_REASON for part in job.components or (job,))


class SlurmExecutor(Executor):
    """The `slurm` kind. Build it with `await SlurmExecutor.create(cfg)`."""

    kind = "slurm"

    def __init__(self, cfg: SlurmConfig, client: SlurmClient, tokens: TokenSource) -> None:
        self.cfg = cfg
        self.client = client
        self.tokens = tokens
        self.layout = Layout(cfg.staging_dir, cfg.out_dir)
        self._lister = out_files.Lister()
        self._attempts = AttemptLocks()
        self._blob_channels = BlobChannels()

    @classmethod
    async def create(cls, cfg: SlurmConfig) -> SlurmExecutor:
        if cfg.tenants.enabled and os.geteuid() != 0:
            raise errors.FailedPrecondition(
                "slurm.tenants needs the executor to run as root: it hands each attempt's directories "
                "to the uid of the job's Unix user"
            )
        tokens = TokenSource(cfg)
        client = SlurmClient(
            cfg.restd_url, user=cfg.user, token=await tokens.current(), timeout_s=cfg.request_timeout_seconds
        )
        for d in (cfg.staging_dir, cfg.out_dir, cfg.blob_cache):
            d.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(secure_roots, cfg.staging_dir, cfg.out_dir, cfg.blob_cache)
        await asyncio.to_thread(bundle.clear_tmp, cfg.blob_cache)
        ex = cls(cfg, client, tokens)
        try:
            info = await ex._slurm(lambda c: c.ping())
            log.info("slurm executor ready: Slurm %s at %s, staging %s", info.release, cfg.restd_url, cfg.staging_dir)
        except errors.StarforgeError as exc:  # serve anyway: describe() reports it until it is back
            log.warning("slurmrestd is not usable yet: %s", exc.message)
        return ex

    async def close(self) -> None:
        await self._blob_channels.close()
        await self.client.aclose()

    async def _slurm(self, op: Callable[[SlurmClient], Awaitable[T]]) -> T:
        """Run one slurmrestd operation with a current token; renew it once if it was refused."""
        self.client.set_token(await self.tokens.current())
        try:
            return await op(self.client)
        except errors.Unauthenticated:
            if not self.tokens.renewable:
                raise
            self.client.set_token(await self.tokens.current(force=True))
            return await op(self.client)

    def _labels(self) -> dict[str, str]:
        return {LABEL_MANAGED: MANAGED_BY, LABEL_EXECUTOR: self.cfg.executor_name}

    async def _our_jobs(self, extra: dict[str, str] | None = None) -> list[SlurmJob]:
        """Jobs of this executor's Slurm user carrying its labels (plus `extra`)."""
        wanted = self._labels() | (extra or {})
        jobs = await self._slurm(lambda c: c.list_jobs(wanted))
        users = {self.cfg.user} | self.cfg.tenants.unix_users()
        return [j for j in jobs if not j.user_name or j.user_name in users]

    # -- describe ---------------------------------------------------------------------------

    async def describe(self) -> Capabilities:
        await self._slurm(lambda c: c.ping())
        caps = {
            ex_pb.EXECUTOR_CAPABILITY_MULTI_POOL,
            ex_pb.EXECUTOR_CAPABILITY_MULTI_NODE,
            # FORGE_OUT_DIR lives on the shared file system and outlives every attempt.
            ex_pb.EXECUTOR_CAPABILITY_PAUSE,
            # the executor reads FORGE_OUT_DIR on the shared file system and streams it
            ex_pb.EXECUTOR_CAPABILITY_ARTIFACTS,
        }
        if any(s.gpus_per_node for s in self.cfg.inventory):
            caps.add(ex_pb.EXECUTOR_CAPABILITY_GPUS)
        if self.cfg.container_runtime != "none":
            caps.add(ex_pb.EXECUTOR_CAPABILITY_IMAGES)
        return Capabilities(
            kind=self.kind,
            runtime=self.cfg.runtime_name,
            capabilities=frozenset(caps),
            # Slurm queues what does not fit now, so the whole configured inventory is offered.
            inventory=tuple(
                SeriesInventory(s.series, s.nodes, s.gpus_per_node, s.nodes * s.gpus_per_node)
                for s in self.cfg.inventory
            ),
            version=VERSION,
        )

    # -- launch -----------------------------------------------------------------------------

    async def launch(self, request: lr_pb.LaunchRequest) -> LaunchResult:
        plan = plan_components(self.cfg, request)
        dirs = self.layout.attempt(request.attempt_id)
        out_dir = self.layout.out_dir(out_key(request))
        container = container_for(self.cfg, request, dirs)
        run_as = unix_user(self.cfg, request)  # an unmapped owner is refused before anything is staged
        async with self._attempts.lock(request.attempt_id):
            existing = await asyncio.to_thread(AttemptRecord.load, dirs.record)
            if existing is not None:
                return self._result(existing, already_launched=True)
            found = await self._our_jobs({LABEL_ATTEMPT: request.attempt_id})
            if found:  # submitted by an executor that died before writing its record
                if self.cfg.tenants.enabled and _held(found[0]):
                    await self._hand_over_and_release(request, dirs, out_dir, found[0].job_id, run_as)
                digest = await image_digest(container, request)
                record = self._record(request, found[0].job_id, out_dir, plan, digest, run_as)
                await asyncio.to_thread(self._save_adopted, dirs, record)
                return self._result(record, already_launched=True)
            with self._attempts.launching_now(request.attempt_id):
                record = await self._stage_and_submit(request, plan, container, dirs, out_dir, run_as)
        log.info("launched %s as Slurm job %d (user %s)", request.attempt_id, record.slurm_job_id, run_as)
        return self._result(record)

    @staticmethod
    def _result(record: AttemptRecord, *, already_launched: bool = False) -> LaunchResult:
        return LaunchResult(
            str(record.slurm_job_id),
            already_launched=already_launched,
            out_dir=record.out_dir,
            image_digest=record.image_digest,
        )

    def _record(
        self,
        request: lr_pb.LaunchRequest,
        slurm_job_id: int,
        out_dir: Path,
        plan: Sequence[tuple[Component, SeriesConfig]],
        digest: str,
        run_as: str,
    ) -> AttemptRecord:
        return AttemptRecord(
            attempt_id=request.attempt_id,
            job_id=request.job_id,
            attempt_number=request.attempt_number,
            slurm_job_id=slurm_job_id,
            out_dir=str(out_dir),
            created_at=time.time(),
            pools=[
                {"pool": c.pool, "series": s.series, "nodes": c.nodes, "gpus_per_node": c.gpus_per_node}
                for c, s in plan
            ],
            image=request.image,
            image_digest=digest,
            unix_user=run_as if self.cfg.tenants.enabled else "",
        )

    @staticmethod
    def _save_adopted(dirs: AttemptDirs, record: AttemptRecord) -> None:
        dirs.root.mkdir(parents=True, exist_ok=True)
        dirs.records.mkdir(mode=0o700, exist_ok=True)
        record.save(dirs.record)

    async def _stage_and_submit(
        self,
        request: lr_pb.LaunchRequest,
        plan: Sequence[tuple[Component, SeriesConfig]],
        container: Container | None,
        dirs: AttemptDirs,
        out_dir: Path,
        run_as: str,
    ) -> AttemptRecord:
        tenants = self.cfg.tenants.enabled
        try:
            await self._materialize(request, dirs, out_dir)
            digest = await image_digest(container, request)
            exports, job_env = split_environment(self.cfg, request, dirs, out_dir)
            components = [c for c, _ in plan]
            script = build_script(
                ScriptSpec(
                    attempt_id=request.attempt_id,
                    job_id=request.job_id,
                    stage_dir=str(dirs.root),
                    exports=exports,
                    components=components,
                    secret_names=sorted(k for k in job_env if k != "PATH"),
                    container=container,
                    ray=ray_spec(self.cfg, components),
                    preamble=self.cfg.script_preamble,
                    bootstrap_sha256=next((f.sha256 for f in request.capsule.files if f.path == "bootstrap.sh"), ""),
                )
            )
            await asyncio.to_thread(dirs.script.write_text, script)
        except BaseException:
            await remove_attempt_root(dirs)
            raise
        labels = labels_for(request) | self._labels()
        job = BatchJob(
            name=f"sf-{request.attempt_id}",
            script=script,
            working_directory=str(dirs.workspace),
            environment=job_env,
            labels=labels,
            partition=self.cfg.partition,
            standard_output=str(dirs.log),  # stderr joins it, in order
            time_limit_minutes=self.cfg.time_limit_minutes or None,
            extra=self.cfg.job_fields,
            # A tenant's job waits until its directories belong to the uid slurmctld gave it.
            hold=tenants,
        )
        resources = [
            JobComponent(
                nodes=c.nodes,
                tasks=c.nodes,
                tasks_per_node=1,
                cpus_per_task=s.cpus_per_node or None,
                gres_per_node=s.gres(c.gpus_per_node),
                memory_per_node_mb=s.memory_per_node_mb or None,
                partition=s.partition,
            )
            for c, s in plan
        ]
        as_user = run_as if tenants else ""
        try:
            if len(resources) == 1:
                submitted = await self._slurm(lambda cl: cl.submit(job, resources[0], run_as=as_user))
            else:
                submitted = await self._slurm(lambda cl: cl.submit_heterogeneous(job, resources, run_as=as_user))
        except (errors.InvalidArgument, errors.Unauthenticated, errors.PermissionDenied):
            # Slurm refused it: nothing runs, so nothing staged is needed. (After a timeout the
            # job may exist: the staged files stay for it and a second Launch finds it by label.)
            await remove_attempt_root(dirs)
            raise
        for warning in submitted.warnings:
            log.warning("slurmrestd on submitting %s: %s", request.attempt_id, warning)
        if tenants:
            await self._hand_over_and_release(request, dirs, out_dir, submitted.job_id, run_as)
        record = self._record(request, submitted.job_id, out_dir, plan, digest, run_as)
        await asyncio.to_thread(record.save, dirs.record)
        return record

    async def _hand_over_and_release(
        self, request: lr_pb.LaunchRequest, dirs: AttemptDirs, out_dir: Path, job_id: int, run_as: str
    ) -> None:
        """Give a held tenant job's directories and run token to the uid slurmctld resolved for
        its user, then release it. Anything unexpected cancels the job: it never runs with
        directories that belong to someone else."""
        try:
            job = await self._slurm(lambda c: c.get_job(job_id))
            if job is None or job.user_id is None or job.group_id is None:
                raise errors.Internal(f"slurmctld does not report the user of held Slurm job {job_id}")
            if job.user_name != run_as or job.user_id == 0 or job.group_id == 0:
                raise errors.Internal(
                    f"Slurm job {job_id} runs as {job.user_name!r} (uid {job.user_id}, gid {job.group_id}), "
                    f"not as tenant user {run_as!r}; it was cancelled"
                )
            uid, gid = job.user_id, job.group_id
            await asyncio.to_thread(hand_over, dirs, out_dir, uid, gid)
            await asyncio.to_thread(write_token_file, request, dirs.scratch, uid=uid, gid=gid)
            parts = [part.job_id for part in job.components or (job,)]  # each component is held
            await self._slurm(lambda c: c.release_all(parts))
        except BaseException:
            await self._slurm(lambda c: c.cancel(job_id))
            await asyncio.to_thread(shutil.rmtree, dirs.root, True)
            raise

    async def _materialize(self, request: lr_pb.LaunchRequest, dirs: AttemptDirs, out_dir: Path) -> None:
        await asyncio.to_thread(secure_roots, self.cfg.staging_dir, self.cfg.out_dir, self.cfg.blob_cache)
        await materialize_attempt(
            request,
            dirs,
            out_dir,
            self.cfg.blob_cache,
            concurrency=self.cfg.fetch_concurrency,
            share_cache=self.cfg.tenants.enabled or (self.cfg.job_uid >= 0 and self.cfg.job_uid != os.geteuid()),
            channels=self._blob_channels,
        )
        await asyncio.to_thread(bundle.verify_bootstrap, request, dirs.capsule)
        if self.cfg.tenants.enabled:
            # The uid is known once slurmctld took the (held) job: _hand_over_and_release.
            await asyncio.to_thread(hand_over, dirs, out_dir, -1, -1)
            return
        await asyncio.to_thread(hand_over, dirs, out_dir, self.cfg.job_uid, self.cfg.job_gid)
        owner = (self.cfg.job_uid, self.cfg.job_gid) if self.cfg.job_uid >= 0 else (None, None)
        await asyncio.to_thread(write_token_file, request, dirs.scratch, uid=owner[0], gid=owner[1])

    # -- observe ----------------------------------------------------------------------------

    async def observe(self, attempt_ids: Sequence[str]) -> list[Observation]:
        records = {a: await asyncio.to_thread(self._load, a) for a in attempt_ids}
        jobs = await self._our_jobs()
        by_id = {j.job_id: j for j in jobs}
        by_attempt = {j.labels.get(LABEL_ATTEMPT, ""): j for j in jobs}
        out = []
        for attempt_id in attempt_ids:
            record = records[attempt_id]
            # The record names the job; labels only find jobs submitted by an executor that died
            # before writing its record. A recorded job slurmctld no longer lists was forgotten.
            job = by_id.get(record.slurm_job_id) if record else by_attempt.get(attempt_id)
            out.append(await self._observe(attempt_id, record, job))
        return out

    def _load(self, attempt_id: str) -> AttemptRecord | None:
        try:
            return AttemptRecord.load(self.layout.attempt(attempt_id).record)
        except errors.InvalidArgument:
            return None

    async def _observe(self, attempt_id: str, record: AttemptRecord | None, job: SlurmJob | None) -> Observation:
        if attempt_id in self._attempts.launching:
            return Observation(attempt_id, state=st.JOB_STATE_PENDING, message="staging files and submitting")
        if record is None and job is None:
            return Observation.missing(attempt_id)
        dirs = self.layout.attempt(attempt_id)
        tail = await asyncio.to_thread(read_log_tail, dirs.log)
        if job is not None:
            stopped = record is not None and record.stop_requested_at is not None
            return obs_map.from_slurm(attempt_id, job, tail, stop_requested=stopped)
        assert record is not None
        outcome = await asyncio.to_thread(read_outcome, dirs.outcome)
        started = await asyncio.to_thread(read_started, dirs.started)
        return obs_map.from_marker(record, outcome, started, tail)

    # -- stop / cleanup / list --------------------------------------------------------------

    async def _job_id(self, attempt_id: str) -> tuple[AttemptRecord | None, int | None]:
        record = await asyncio.to_thread(self._load, attempt_id)
        if record is not None:
            return record, record.slurm_job_id
        try:
            check_id(attempt_id, "attempt_id")
        except errors.InvalidArgument:
            return None, None
        found = await self._our_jobs({LABEL_ATTEMPT: attempt_id})
        return None, (found[0].job_id if found else None)

    async def stop(self, attempt_id: str, grace_seconds: float) -> bool:
        """SIGTERM to the job's steps, then Slurm's cancel after `grace_seconds` (+ a margin).

        A plain cancel would hand the capsule's runner two SIGTERMs at once (slurmd signals the
        step, and srun in the batch script forwards the one it got), which the runner takes as
        "kill the training command now". So the steps alone get SIGTERM first: the runner stops
        the training command within its grace and exits; what still runs after that is cancelled
        (SIGTERM, SIGKILL after the cluster's KillWait). The stop is recorded first, so the
        attempt reads STOPPED however the job then ends.
        """
        async with self._attempts.lock(attempt_id):
            record, job_id = await self._job_id(attempt_id)
            if job_id is None:
                return False
            slurm_id: int = job_id
            job = await self._slurm(lambda c: c.get_job(slurm_id))
            if job is None or job_ledger_state(job).state not in (st.JOB_STATE_PENDING, st.JOB_STATE_RUNNING):
                return False
            if record is not None:
                record.stop_requested_at = time.time()
                await asyncio.to_thread(record.save, self.layout.attempt(attempt_id).record)
            if job.state == "RUNNING" and await self._slurm(lambda c: c.signal(slurm_id, "SIGTERM", steps_only=True)):
                await self._wait_ended(slurm_id, grace_seconds + STOP_MARGIN_SECONDS)
            await self._slurm(lambda c: c.cancel(slurm_id))
        log.info("stopped %s (Slurm job %d)", attempt_id, slurm_id)
        return True

    async def _wait_ended(self, job_id: int, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            job = await self._slurm(lambda c: c.get_job(job_id))
            if job is None or job_ledger_state(job).state not in (st.JOB_STATE_PENDING, st.JOB_STATE_RUNNING):
                return
            await asyncio.sleep(STOP_POLL_SECONDS)

    async def cleanup(self, attempt_id: str) -> int:
        async with self._attempts.lock(attempt_id):
            (current,) = await self.observe([attempt_id])
            if current.state in (st.JOB_STATE_PENDING, st.JOB_STATE_RUNNING):
                raise errors.FailedPrecondition(
                    f"attempt {attempt_id} still runs (Slurm job {current.backend_handle}); stop it before "
                    "cleaning it up",
                    precondition_violations=(errors.PreconditionViolation("STATE", attempt_id, "attempt is running"),),
                )
            record = await asyncio.to_thread(self._load, attempt_id)
            if record is None:
                return 0
            dirs = self.layout.attempt(attempt_id)
            removed = 0
            for d in dirs.removable():
                if d.exists():
                    await asyncio.to_thread(shutil.rmtree, d)
                    removed += 1
            if record.cleaned_at is None:
                record.cleaned_at = time.time()
                await asyncio.to_thread(record.save, dirs.record)
        if removed:
            log.info("cleaned up %s (%d directories)", attempt_id, removed)
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
        ids.update(j.labels[LABEL_ATTEMPT] for j in await self._our_jobs() if j.labels.get(LABEL_ATTEMPT))
        return await self.observe(sorted(ids))
