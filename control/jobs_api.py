"""Job operations behind ControlService: submit, read, control, follow. Servicers call these."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session
from starforge_api.control.v1 import error_reason_pb2 as er
from starforge_api.job.v1 import job_pb2, job_spec_pb2, telemetry_pb2, workspace_pb2
from starforge_api.job.v1 import job_state_pb2 as st

from common import errors, ids
from common.hashing import is_digest, manifest_digest, manifest_text, parse_manifest_text
from control import admission, auth, blob_access, datasets, hf, job_history, rate_limit, secrets
from control import metrics as prom
from control.auth import Principal
from control.config import DEFAULT_QUEUE
from control.context import Context
from control.db import models as m
from control.db.group_commit import Batched, GroupCommit, per_item
from control.ledger import convert, jobs, pipeline
from control.ledger import state_machine as sm
from control.scheduler.dispatch import queue_position, queue_positions
from control.telemetry import logs, metrics
from control.telemetry.ledger_heads import LedgerHeads
from control.telemetry.log_tail import LogBatch
from control.workspace_records import ParsedManifest, WorkspaceRecords

FOLLOW_POLL_SECONDS = 1.0
# How often the heads of the followed jobs are read from the ledger (LedgerHeads): about the
# longest a line another replica stored after the job's tail here, or a state it changed, waits
# before a follower served from memory reads it.
LEDGER_CHECK_SECONDS = 5.0
NO_CURSOR = (0, -1)  # before every line
MAX_PAGE = 1000
EARLIER_PAGE = 500  # lines before a cursor when the request does not say how many
MAX_EARLIER_PAGE = 10_000  # one response: a reader scrolling back pages, it does not take all at once
# A stored manifest named by SubmitJob's workspace_digest is read whole: no larger than the
# SubmitJob message that could have carried its files (the text takes about the bytes per file
# the message does), so naming a workspace by digest allows no bigger one than listing it.
MAX_MANIFEST_BYTES = auth.RECEIVE_LIMITS["/starforge.control.v1.ControlService/SubmitJob"]
# A submission is looked at on the event loop, to spare it the pre-admission ledger read
# (`JobsApi._pre_read`), only when that is cheap: a workspace of at most this many files (its
# digest computed there) and a config of at most this many bytes (parsed there).
LOOP_DIGEST_FILES = 256
LOOP_CONFIG_BYTES = 64 * 1024


@dataclass(frozen=True)
class Submitted:
    job: job_pb2.Job
    warnings: list[str]


def visible_job(s: Session, principal: Principal, job_id: str) -> m.Job:
    if job_id == "latest":
        job = s.scalars(
            select(m.Job).where(m.Job.owner == principal.user).order_by(m.Job.created_at.desc()).limit(1)
        ).one_or_none()
        if job is None:
            raise errors.NotFound("you have no jobs yet; submit one with `sf submit <experiment>`")
        return job
    job = s.get(m.Job, job_id)
    if job is None or not principal.can_see(job.owner):
        raise errors.NotFound(f"job {job_id} not found")
    return job


def job_proto(s: Session, job: m.Job, *, trim: bool = False, position: int | None = None) -> job_pb2.Job:
    """The job as the API shows it; `position` when the caller already has its queue position."""
    if position is None:
        position = queue_position(s, job)
    return convert.job_to_proto(job, jobs.attempts_of(s, job.id), queue_position=position, trim_spec=trim)


T = TypeVar("T")


def _reader(
    job_id: str, cursor: logs.Cursor | None, attempt_number: int
) -> Callable[[Session], tuple[int, list[telemetry_pb2.LogLine]]]:
    """The job's state, then the lines after `cursor`: in that order, so that a terminal state
    with no lines after the cursor means every line stored before the job ended was read."""

    def read(s: Session) -> tuple[int, list[telemetry_pb2.LogLine]]:
        state = jobs.job_state(s, job_id)
        return state, [logs.to_proto(r) for r in logs.after(s, job_id, cursor, 2000, attempt_number)]

    return read


class JobOwners:
    """The owners of jobs this process has authorized a read of (a job's owner never changes).

    Bounded: at most MAX entries, forgotten all at once when full (a miss costs one read)."""

    MAX = 100_000

    def __init__(self) -> None:
        self._owners: dict[str, str] = {}

    def get(self, job_id: str) -> str | None:
        return self._owners.get(job_id)

    def put(self, job_id: str, owner: str) -> None:
        if len(self._owners) >= self.MAX:
            self._owners.clear()
        self._owners[job_id] = owner


class SharedReads:
    """Identical reads in flight at the same time share one database query.

    The followers of a job (`sf job logs -f`, browsers) wake together on its `logs:` notification
    and ask for the same lines after the same cursor: with hundreds of followers, one query each
    kept the database thread (SQLite has one) behind the lines arriving, and latency grew without
    bound (tests/reliability/test_soak.py). Keys carry the notification generation the caller saw,
    so a caller only shares a read that started after that notification.
    """

    def __init__(self) -> None:
        self._inflight: dict[Hashable, asyncio.Future[Any]] = {}

    async def get(self, key: Hashable, read: Callable[[], Awaitable[T]]) -> T:
        fut = self._inflight.get(key)
        if fut is None or fut.done():
            fut = asyncio.ensure_future(read())
            self._inflight[key] = fut
            fut.add_done_callback(lambda f: self._inflight.pop(key) if self._inflight.get(key) is f else None)
        result: T = await asyncio.shield(fut)
        return result


class JobsApi:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.shared = SharedReads()
        self.owners = JobOwners()
        self.heads = LedgerHeads(functools.partial(ctx.db.run, background=True), LEDGER_CHECK_SECONDS)
        self.workspaces = WorkspaceRecords()
        self.hub = hf.HubChecker(ctx.cfg.hf_endpoint, ctx.cfg.hf_token) if ctx.cfg.hf_precheck else None
        # the counter's child for admitted calls, looked up once (`labels` hashes and locks per call)
        self._admitted_count = prom.SUBMISSIONS.labels("admitted", "")
        self.submit_rate = rate_limit.SubmitRateLimiter(ctx.cfg.submit_rate_per_user, ctx.cfg.submit_burst_per_user)
        # admitted submissions waiting for the database thread are queued in one transaction
        self.queue_jobs = GroupCommit(ctx.db, _queue_jobs)
        # and the checks before admission, and admission itself, in one worker hop per batch
        # (without a Hub pre-check: its network round trips would make a batch wait for each other)
        self.pre_reads: Batched[tuple[Principal, job_spec_pb2.JobSpec, bool], tuple[job_spec_pb2.JobSpec, bool]] = (
            Batched(
                lambda items: ctx.db.run(
                    lambda s: per_item(lambda it: _readable_and_pinned(s, *it), items, errors.StarforgeError)
                ),
                parallel=ctx.db.workers,
            )
        )
        self.admissions: Batched[tuple[Principal, job_spec_pb2.JobSpec, bool, bool], admission.Admitted] = Batched(
            lambda items: asyncio.to_thread(per_item, lambda it: self._admission(*it), items)
        )

    async def submit(
        self,
        principal: Principal,
        spec: job_spec_pb2.JobSpec,
        request_id: str,
        dry_run: bool,
        workspace_digest: str = "",
    ) -> Submitted:
        """Admit and queue `spec`; with `workspace_digest`, its workspace is the manifest of that
        digest the caller was admitted with before (the response's job then lists no files)."""
        _check_request_id(request_id)
        # Only a manifest whose digest the client declared is kept (sf declares it; admission fills
        # it in for a raw client, which would otherwise store a blob and an owner row per call).
        declared = bool(spec.workspace.digest)
        spec, admitted, manifest_kept = await self._admit(principal, spec, workspace_digest)
        warnings = _warnings(spec, admitted)
        admitted.warnings = warnings  # recorded on the job
        if dry_run:
            return Submitted(_trimmed(_dry_run_job(spec, admitted), bool(workspace_digest)), warnings)
        if declared and not workspace_digest:
            await self._keep_manifest(principal, spec.workspace, manifest_kept)
        job = await self.queue_jobs.submit(
            jobs.NewJob(principal.user, request_id, spec, self._admitted_columns(spec, admitted))
        )
        self.ctx.notifier.notify(job.job_id, "schedule")
        return Submitted(_trimmed(job, bool(workspace_digest)), warnings)

    async def _admit(
        self, principal: Principal, spec: job_spec_pb2.JobSpec, workspace_digest: str
    ) -> tuple[job_spec_pb2.JobSpec, admission.Admitted, bool]:
        """Every check of a submission, counted as admitted or refused: the caller's rate, the
        workspace (named by digest: loaded from the caller's stored manifest), its ownership,
        dataset pins, admission itself and the secret references. Returns the spec with its
        workspace filled in and datasets pinned, what admission decided, and whether the caller
        already owns the blob of the manifest digest the spec declared."""
        by_digest = bool(workspace_digest)
        try:
            self.submit_rate.check(principal)  # before any admission work is spent on the call
            # a workspace this caller was admitted with before: its files need no second look
            known = by_digest and self.workspaces.admitted(_record_key(principal), workspace_digest)
            if by_digest:
                spec.workspace.CopyFrom(await self._stored_workspace(principal, spec, workspace_digest))
            spec, manifest_kept = await self._pre_read(principal, spec, by_digest, known)
            if self.hub is None:
                admitted = await self.admissions.submit((principal, spec, by_digest, known))
            else:
                admitted = await asyncio.to_thread(self._admission, principal, spec, by_digest, known)
            if spec.secrets:  # no database round trip for the jobs that name none
                await self.ctx.db.run(lambda s: secrets.check_refs(s, spec, principal.user))
        except errors.StarforgeError as e:
            prom.SUBMISSIONS.labels("refused", e.reason_name).inc()
            raise
        self._admitted_count.inc()
        # every file readable by this caller and every path rule passed, for the digest admission
        # computed from the files (or loaded from the stored manifest of that digest)
        self.workspaces.record_admitted(_record_key(principal), spec.workspace.digest)
        spec.observability.CopyFrom(admitted.observability)  # what the job records and shows
        return spec, admitted, manifest_kept

    async def _pre_read(
        self, principal: Principal, spec: job_spec_pb2.JobSpec, by_digest: bool, known: bool
    ) -> tuple[job_spec_pb2.JobSpec, bool]:
        """`_readable_and_pinned` (batched on the database thread), or nothing from the ledger when
        it has nothing to add: a workspace this caller was admitted with (`WorkspaceRecords`:
        every file was readable by them, and ownership is never taken back), no dataset to pin,
        and no manifest digest declared besides one named by `workspace_digest` (whose ownership
        `_keep_manifest` would need). A storm of submissions of one workspace then pays one hop
        to the database thread fewer each (admission benchmark)."""
        if not by_digest:  # (a declared digest needs the read anyway: no need to compute one)
            known = not spec.workspace.digest and self._listed_workspace_known(principal, spec.workspace)
        if known and len(spec.config_json) <= LOOP_CONFIG_BYTES:
            pinned = datasets.with_config_inputs(spec, admission.parse_config(spec))
            if not datasets.mounts(pinned):  # no dataset whose version `pin` would resolve
                return pinned, False
        return await self.pre_reads.submit((principal, spec, known))

    def _listed_workspace_known(self, principal: Principal, workspace: workspace_pb2.WorkspaceManifest) -> bool:
        """Whether the files a submission lists are a workspace this caller was admitted with; only
        for a small one (its digest is computed here, on the event loop; a large one is checked on
        the database thread as before)."""
        if len(workspace.files) > LOOP_DIGEST_FILES:
            return False
        digest = manifest_digest((f.path, f.sha256, f.executable) for f in workspace.files)
        return self.workspaces.admitted(_record_key(principal), digest)

    async def _stored_workspace(
        self, principal: Principal, spec: job_spec_pb2.JobSpec, digest: str
    ) -> workspace_pb2.WorkspaceManifest:
        """The manifest `digest` names, as the files SubmitJob would have listed: only a manifest
        blob the caller owns (one they were admitted with), each file's size from its blob, every
        blob present. Admission then checks the files as if they had been sent."""
        if not is_digest(digest):
            raise errors.InvalidArgument(
                f"workspace_digest is not a sha256 digest: {digest[:80]!r}",
                field_violations=(errors.FieldViolation("workspace_digest", "64 lowercase hex characters"),),
            )
        if len(spec.workspace.files):
            raise errors.InvalidArgument(
                "workspace_digest names the workspace: spec.workspace must not list files too",
                field_violations=(errors.FieldViolation("spec.workspace.files", "empty with workspace_digest"),),
            )
        owned = principal.admin or await self.ctx.db.run(
            lambda s: digest in blob_access.readable(s, principal.user, [digest])
        )
        manifest = await asyncio.to_thread(self._read_manifest, digest) if owned else None
        if manifest is None:
            raise errors.FailedPrecondition(
                f"no workspace {digest[:12]} was admitted for you; submit its files (sf does so by itself)",
                reason=er.ERROR_REASON_MISSING_BLOB,
                precondition_violations=(errors.PreconditionViolation("WORKSPACE", digest, "not admitted"),),
            )
        return manifest

    def _read_manifest(self, digest: str) -> workspace_pb2.WorkspaceManifest | None:
        """The stored manifest blob `digest` as a WorkspaceManifest (None when absent or not a
        manifest); MISSING_BLOB when a blob it lists is gone. Every blob is stat'ed each time; the
        parse is kept (`WorkspaceRecords.manifest`) and used while the blobs' sizes are unchanged."""
        store = self.ctx.store
        size = store.sizes([digest])[digest]
        if size is None or size > MAX_MANIFEST_BYTES:
            return None
        kept = self.workspaces.manifest(digest)
        if kept is not None:
            sizes = store.sizes(list(kept.sizes))
            admission.check_blobs_present(sizes, "workspace")
            if sizes == kept.sizes:
                return kept.workspace()
        entries = parse_manifest_text(store.read_prefix(digest, MAX_MANIFEST_BYTES))
        if not entries:
            return None
        sizes = store.sizes(sorted({d for _, d, _ in entries}))
        admission.check_blobs_present(sizes, "workspace")
        files = [
            workspace_pb2.WorkspaceFile(path=path, sha256=d, size=sizes[d] or 0, executable=x) for path, d, x in entries
        ]
        manifest = workspace_pb2.WorkspaceManifest(files=files, digest=digest, total_bytes=sum(f.size for f in files))
        present = {d: n for d, n in sizes.items() if n is not None}
        self.workspaces.keep_manifest(digest, ParsedManifest(manifest.SerializeToString(), present))
        return manifest

    async def _keep_manifest(
        self, principal: Principal, manifest: workspace_pb2.WorkspaceManifest, owned: bool
    ) -> None:
        """Store an admitted manifest as a blob the submitter owns, so that the next submission of
        the same workspace can name it by digest (SubmitJob's workspace_digest). Nothing to do
        when the caller owns it already and the blob is there (every re-submission)."""
        store = self.ctx.store
        if owned and await asyncio.to_thread(store.has, manifest.digest):
            return
        text = manifest_text((f.path, f.sha256, f.executable) for f in manifest.files)
        stored = await asyncio.to_thread(store.put_bytes, text)
        if stored != manifest.digest:  # admission checked the digest against the files
            raise errors.Internal(f"manifest {manifest.digest[:12]} stored as {stored[:12]}")
        if not owned:
            await self.ctx.db.run(lambda s: blob_access.record(s, principal.user, [stored]))

    def _admission(
        self, principal: Principal, spec: job_spec_pb2.JobSpec, by_digest: bool = False, known: bool = False
    ) -> admission.Admitted:
        """Admission; `by_digest`: the workspace was just loaded from its stored manifest, each
        file's size read from its blob (`_read_manifest`); `known`: and that manifest is one this
        caller was admitted with before (`WorkspaceRecords.admitted`)."""
        return admission.admit(
            spec,
            principal,
            self.ctx.cfg,
            self.ctx.catalog,
            self.ctx.store,
            self.ctx.executors,
            self.hub,
            blobs_checked=by_digest,
            workspace_admitted=by_digest and known,
        )

    def _admitted_columns(self, spec: job_spec_pb2.JobSpec, admitted: admission.Admitted) -> dict[str, Any]:
        """The job row's values that admission decided (shared by a pipeline's stages)."""
        provenance = job_spec_pb2.Provenance()
        provenance.CopyFrom(spec.provenance)
        provenance.recipe_digest = admitted.recipe.digest
        needs_gpus: dict[str, int] = {}
        needs_nodes: dict[str, int] = {}
        for p in admitted.pools:
            needs_gpus[p.series] = needs_gpus.get(p.series, 0) + (p.nodes * p.gpus_per_node or 1)
            needs_nodes[p.series] = max(needs_nodes.get(p.series, 0), p.nodes)
        return dict(
            project=spec.project,
            experiment=spec.experiment,
            method=spec.method,
            queue=spec.queue or DEFAULT_QUEUE,
            priority=max(-100, min(100, spec.priority)),
            series=admitted.series,
            gpus=admitted.gpus,
            needs=json.dumps({"gpus": needs_gpus, "nodes": needs_nodes}),
            eligible_fleets=json.dumps(admitted.fleets),
            runtime_id=admitted.runtime_id,
            pools=convert.pools_to_bytes(admitted.pools),
            resolved_config=json.dumps(admitted.resolved_config),
            image=admitted.image,
            image_source=admitted.image_source,
            image_source_detail=admitted.image_source_detail,
            framework_version=admitted.framework_version,
            warnings=json.dumps(admitted.warnings),
            provenance=provenance.SerializeToString(),
            retry_budget=spec.retry_budget if spec.HasField("retry_budget") else self.ctx.cfg.default_retry_budget,
            labels=json.dumps(dict(spec.labels)),
            next_cause=job_pb2.ATTEMPT_CAUSE_INITIAL,
        )

    async def get(self, principal: Principal, job_id: str) -> job_pb2.Job:
        return await self.ctx.db.run(lambda s: job_proto(s, visible_job(s, principal, job_id)))

    async def list_jobs(
        self,
        principal: Principal,
        *,
        project: str,
        owner: str,
        states: Sequence[int],
        experiment: str,
        page_size: int,
        page_token: str,
        labels: Mapping[str, str] | None = None,
    ) -> tuple[list[job_pb2.Job], str]:
        size = page_size or 50
        if not 1 <= size <= MAX_PAGE:
            raise errors.InvalidArgument(f"page_size must be 1-{MAX_PAGE}")
        if page_token and not ids.is_job_id(page_token):
            raise errors.InvalidArgument(
                "page_token is not one a ListJobs response gave; start again without it",
                field_violations=(errors.FieldViolation("page_token", "not a token from next_page_token"),),
            )
        label_patterns = _label_patterns(labels or {})

        def query(s: Session) -> tuple[list[job_pb2.Job], str]:
            stmt = select(m.Job)
            if owner == "*":
                if not principal.admin:
                    raise errors.PermissionDenied("only admins can list every user's jobs")
            else:
                who = owner or principal.user
                if who != principal.user and not principal.admin:
                    raise errors.PermissionDenied(f"you cannot list @{who}'s jobs")
                stmt = stmt.where(m.Job.owner == who)
            if project:
                stmt = stmt.where(m.Job.project == project)
            if states:
                stmt = stmt.where(m.Job.state.in_(list(states)))
            if experiment:
                stmt = stmt.where(m.Job.experiment == experiment)
            for pattern in label_patterns:
                stmt = stmt.where(m.Job.labels.like(pattern, escape="\\"))
            if page_token:
                stmt = stmt.where(m.Job.id < page_token)
            rows = list(s.scalars(stmt.order_by(m.Job.id.desc()).limit(size + 1)))
            nxt = rows[size - 1].id if len(rows) > size else ""
            page = rows[:size]
            positions = queue_positions(s, page)
            return [job_proto(s, j, trim=True, position=positions[j.id]) for j in page], nxt

        return await self.ctx.db.run(query)

    async def stop(self, principal: Principal, job_id: str, reason: str) -> job_pb2.Job:
        return await self._control(principal, job_id, "stop", reason or f"stopped by {principal.user}")

    async def pause(self, principal: Principal, job_id: str, reason: str) -> job_pb2.Job:
        return await self._control(principal, job_id, "pause", reason or f"paused by {principal.user}")

    async def _control(self, principal: Principal, job_id: str, what: str, reason: str) -> job_pb2.Job:
        def apply(s: Session) -> tuple[job_pb2.Job, tuple[str, str] | None]:
            job = visible_job(s, principal, job_id)
            job = jobs.get_job(s, job.id, for_update=True)
            target = sm.STOPPED if what == "stop" else sm.PAUSED
            if job.state == target:
                return job_proto(s, job), None
            if what == "stop" and job.state in (sm.SUCCEEDED, sm.FAILED):
                raise errors.FailedPrecondition(f"job {job.id} already ended {sm.name(job.state)}; nothing to stop")
            if what == "pause" and job.state not in sm.ACTIVE:
                raise errors.FailedPrecondition(
                    f"job {job.id} is {sm.name(job.state)}; only a running job can be paused"
                )
            if job.state in (sm.QUEUED, sm.PAUSED) and what == "stop":
                jobs.transition(s, job, sm.STOPPED, reason)
                pipeline.on_end(s, job)
                return job_proto(s, job), None
            attempt = jobs.current_attempt(s, job)
            if what == "pause":
                self._refuse_unpausable(job, attempt)
            jobs.request(s, job, sm.STOP if what == "stop" else sm.PAUSE)
            if attempt is not None and attempt.state in sm.ACTIVE:
                attempt.reason = reason
                return job_proto(s, job), (attempt.id, attempt.fleet)
            return job_proto(s, job), None

        job, target = await self.ctx.db.run(apply)
        if target is not None:
            self.ctx.stop_requests.put(*target)
        self.ctx.notifier.notify(job.job_id, "reconcile", "schedule")
        return job

    def _refuse_unpausable(self, job: m.Job, attempt: m.Attempt | None) -> None:
        """FailedPrecondition when the fleet the job runs on (or is bound to) cannot pause."""
        fleet = attempt.fleet if attempt is not None and attempt.fleet else job.fleet
        status = self.ctx.executors.status.get(fleet) if fleet else None
        if status is not None:
            status.refuse_pause(job.id)

    async def requeue(self, principal: Principal, job_id: str, what: str) -> job_pb2.Job:
        """`resume` (PAUSED/STOPPED) or `retry` (FAILED/STOPPED): a new attempt of the same run.

        Both keep the job id and its FORGE_OUT_DIR, so the new attempt starts with FORGE_RESUME=1
        and resumes from the latest checkpoint there."""

        def apply(s: Session) -> job_pb2.Job:
            job = jobs.get_job(s, visible_job(s, principal, job_id).id, for_update=True)
            allowed = (sm.PAUSED, sm.STOPPED) if what == "resume" else (sm.FAILED, sm.STOPPED)
            if job.state not in allowed:
                want = " or ".join(sm.name(x) for x in allowed)
                raise errors.FailedPrecondition(f"job {job.id} is {sm.name(job.state)}; {what} needs it {want}")
            job.next_cause = job_pb2.ATTEMPT_CAUSE_RESUME if what == "resume" else job_pb2.ATTEMPT_CAUSE_USER_RETRY
            job.not_before = 0.0
            jobs.transition(s, job, sm.QUEUED, f"{what}d by {principal.user}")
            job.wait_reason = st.WAIT_REASON_PRIORITY
            job.wait_message = "waiting for the scheduler"
            return job_proto(s, job)

        job = await self.ctx.db.run(apply)
        self.ctx.notifier.notify(job.job_id, "schedule")
        return job

    async def stream_logs(
        self,
        principal: Principal,
        job_id: str,
        tail_lines: int,
        follow: bool,
        attempt_number: int,
        after: logs.Cursor | None = None,
    ) -> AsyncIterator[LogBatch]:
        """Yields batches of lines in order; the last batch of a follow carries the final state.

        A follower takes the lines this process stored from the job's in-memory tail
        (control.telemetry.log_tail) when its cursor is inside it: no database read, and the
        followers at the same cursor share one batch. It reads the ledger when its cursor is
        outside the tail (there is none here: its poll finds what another replica stored), when
        the job's state was notified, and when the ledger heads (control.telemetry.ledger_heads,
        read for all followed jobs every LEDGER_CHECK_SECONDS) show lines beyond the tail or a
        state it has not seen: what another replica stored or changed."""
        # Every read here is a background call (control.db.engine): thousands of followers
        # connecting or polling wait behind the ingest writes they follow, never the reverse.
        # Followers that ask the same thing at once share one read (SharedReads).
        # (not "latest": a job submitted a moment ago must not be missed by a read begun before it)
        if job_id == "latest":
            jid = (await self.ctx.db.run(lambda s: visible_job(s, principal, job_id), background=True)).id
        else:
            jid = await self._visible_job_id(principal, job_id)
        if tail_lines < 0:
            raise errors.InvalidArgument("tail_lines must not be negative")
        key = f"logs:{jid}"
        cursor: logs.Cursor | None = after
        if tail_lines > 0 and after is None:
            rows = await self.shared.get(
                ("tail", jid, tail_lines, attempt_number, self.ctx.notifier.generation(key)),
                functools.partial(
                    self.ctx.db.run,
                    lambda s: [logs.to_proto(r) for r in logs.tail(s, jid, tail_lines, attempt_number)],
                    background=True,
                ),
            )
            if rows:
                cursor = (rows[-1].attempt_number, rows[-1].offset)
                yield LogBatch(list(rows))
            elif not follow:
                return
        notifier, tails, heads = self.ctx.notifier, self.ctx.log_tails, self.heads
        use_memory = False  # after its first ledger read, a follower may take lines from memory
        state_seen = 0  # the job's notification generation at that read: a new one means a new state
        state_read = 0  # the job's state that read returned
        heads_seen = heads.seq  # the ledger heads' refresh this follower last compared itself with

        def ledger_ahead() -> bool:
            """Whether the ledger heads' latest refresh shows what this follower has not seen and
            memory cannot give it: another state, or lines beyond both its cursor and the tail."""
            nonlocal heads_seen
            if heads.seq == heads_seen:
                return False
            heads_seen = heads.seq
            head = heads.head(jid)
            if head is None or head[0] != state_read:
                return True
            newest = head[1]
            return newest is not None and newest > max(cursor or NO_CURSOR, tails.newest(jid) or NO_CURSOR)

        if follow:
            heads.watch(jid)
        try:
            while True:
                if use_memory and notifier.generation(jid) == state_seen and not ledger_ahead():
                    batch = tails.after(jid, cursor, attempt_number)
                    if batch is not None:
                        if batch.lines:
                            cursor = batch.cursor
                            yield batch
                        else:  # nothing new here; a poll that times out looks here again, not at the ledger
                            await notifier.wait(key, FOLLOW_POLL_SECONDS)
                        continue
                generation = (notifier.generation(key), notifier.generation(jid))
                state_seen = generation[1]
                heads_seen = heads.seq
                state, lines = await self.shared.get(
                    (jid, cursor, attempt_number, generation),
                    functools.partial(self.ctx.db.run, _reader(jid, cursor, attempt_number), background=True),
                )
                state_read = state
                if lines:
                    cursor = (lines[-1].attempt_number, lines[-1].offset)
                    yield LogBatch(lines)
                    # There may be more. A follower behind (its read took a while, lines were stored
                    # meanwhile) goes on from memory when its cursor is now inside the tail, instead of
                    # chasing the newest lines read after read; an ended job's last lines are read on.
                    use_memory = follow and state not in sm.TERMINAL and state != sm.PAUSED
                    continue
                if not follow:
                    return
                if state in sm.TERMINAL or state == sm.PAUSED:
                    # Everything stored before the job ended has been sent.
                    yield LogBatch([], state)
                    return
                use_memory = True
                if notifier.generation(key) == generation[0]:  # else lines were stored while it read
                    await notifier.wait(key, FOLLOW_POLL_SECONDS)
        finally:
            if follow:
                heads.unwatch(jid)

    async def _visible_job_id(self, principal: Principal, job_id: str) -> str:
        """`job_id` when the job exists and `principal` may see it, else NotFound (as visible_job).

        A job's owner never changes, so it is read once and kept (JobOwners): the thousands of
        followers that connect to a job are authorized from memory, not by a ledger read each."""
        owner = self.owners.get(job_id)
        if owner is None:
            owner = await self.shared.get(
                ("owner", job_id),
                functools.partial(self.ctx.db.run, lambda s: jobs.job_owner(s, job_id), background=True),
            )
            self.owners.put(job_id, owner)
        if not principal.can_see(owner):
            raise errors.NotFound(f"job {job_id} not found")
        return job_id

    async def earlier_logs(
        self, principal: Principal, job_id: str, before: logs.Cursor, count: int, attempt_number: int
    ) -> list[telemetry_pb2.LogLine]:
        """The last `count` lines before the line `before` (0 takes EARLIER_PAGE), in order: a page
        further back than a tail, for a reader scrolling up. Never follows."""
        if count < 0 or count > MAX_EARLIER_PAGE:
            raise errors.InvalidArgument(
                f"tail_lines must be 0 to {MAX_EARLIER_PAGE} with a before cursor (got {count})",
                field_violations=(errors.FieldViolation("tail_lines", f"must be 0 to {MAX_EARLIER_PAGE}"),),
            )
        job = await self.ctx.db.run(lambda s: visible_job(s, principal, job_id), background=True)
        jid, n = job.id, count or EARLIER_PAGE
        return await self.ctx.db.run(
            lambda s: [logs.to_proto(r) for r in logs.before(s, jid, before, n, attempt_number)], background=True
        )

    async def watch(
        self, principal: Principal, job_id: str, after_sequence: int = 0
    ) -> AsyncIterator[tuple[job_pb2.JobEvent, job_pb2.Job]]:
        job = await self.ctx.db.run(lambda s: visible_job(s, principal, job_id), background=True)
        jid = job.id
        seq = after_sequence
        history: list[job_pb2.JobEvent] = []  # every event so far: a past job is rebuilt from them
        while True:
            last = history[-1].sequence if history else 0

            def read(s: Session, after: int = last) -> tuple[list[m.JobEvent], job_pb2.Job]:
                evs = list(
                    s.scalars(
                        select(m.JobEvent)
                        .where(m.JobEvent.job_id == jid, m.JobEvent.seq > after)
                        .order_by(m.JobEvent.seq)
                    )
                )
                return evs, job_proto(s, jobs.get_job(s, jid))

            events, current = await self.ctx.db.run(read, background=True)
            history.extend(convert.event_to_proto(e) for e in events)
            for i in range(len(history) - len(events), len(history)):
                if history[i].sequence > seq:
                    seq = history[i].sequence
                    yield history[i], job_history.job_after(current, history, i)
            if current.state in sm.TERMINAL:
                return
            await self.ctx.notifier.wait(jid, FOLLOW_POLL_SECONDS)

    async def metrics(
        self,
        principal: Principal,
        job_id: str,
        names: Sequence[str],
        max_points: int,
        after_step: int,
        up_to_step: int = 0,
    ) -> list[telemetry_pb2.MetricSeries]:
        def read(s: Session) -> list[telemetry_pb2.MetricSeries]:
            job = visible_job(s, principal, job_id)
            return metrics.series(s, job.id, names, after_step=after_step, max_points=max_points, up_to_step=up_to_step)

        return await self.ctx.db.run(read)

    async def samples(self, principal: Principal, job_id: str, limit: int) -> list[telemetry_pb2.Sample]:
        def read(s: Session) -> list[telemetry_pb2.Sample]:
            job = visible_job(s, principal, job_id)
            return metrics.samples(s, job.id, limit or 100)

        return await self.ctx.db.run(read)


def _label_patterns(labels: Mapping[str, str]) -> list[str]:
    """LIKE patterns matching a `key: value` pair in a job's labels column (json.dumps of a dict).

    Inside a JSON string every `"` is escaped, so `"key": "value"` with both sides JSON-encoded can
    only match a real pair, never text inside another label's value."""
    if any(not key for key in labels):
        raise errors.InvalidArgument(
            "a label filter needs a key (key=value)",
            field_violations=(errors.FieldViolation("labels", "empty key"),),
        )

    def like_escape(text: str) -> str:
        return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")

    return [f"%{like_escape(json.dumps(k) + ': ' + json.dumps(v))}%" for k, v in sorted(labels.items())]


def _warnings(spec: job_spec_pb2.JobSpec, admitted: admission.Admitted) -> list[str]:
    warnings = list(admitted.warnings)
    if spec.provenance.untracked_files:
        warnings.append(f"{len(spec.provenance.untracked_files)} untracked file(s) were not packed")
    return warnings


def _dry_run_job(spec: job_spec_pb2.JobSpec, admitted: admission.Admitted) -> job_pb2.Job:
    """What a dry run answers: the job as it would be queued, never stored."""
    return job_pb2.Job(
        state=st.JOB_STATE_QUEUED,
        spec=spec,
        pools=admitted.pools,
        image=admitted.image,
        image_source=admitted.image_source,  # type: ignore[arg-type]
        image_source_detail=admitted.image_source_detail,
        framework_version=admitted.framework_version,
        runtime_id=admitted.runtime_id,
        warnings=admitted.warnings,
    )


def _queue_jobs(s: Session, batch: Sequence[jobs.NewJob]) -> list[job_pb2.Job]:
    """Queue a batch of admitted submissions (one transaction, `GroupCommit`); each one's job as
    GetJob shows it. A new job has no attempts, and its queue position came with its insert."""
    return [
        convert.job_to_proto(q.job, [], queue_position=q.queue_position) if q.created else job_proto(s, q.job)
        for q in jobs.create_jobs(s, batch)
    ]


def _readable_and_pinned(
    s: Session, principal: Principal, spec: job_spec_pb2.JobSpec, known: bool
) -> tuple[job_spec_pb2.JobSpec, bool]:
    """One transaction for the reads a submission needs before admission: its workspace names
    only blobs the submitter may read, and its datasets pinned to versions. Also whether the
    submitter owns the blob of the manifest digest the spec declares (asked in the same query).
    `known`: the workspace is the stored manifest of a digest this caller was admitted with
    (`WorkspaceRecords.admitted`): its files were readable then, and ownership is never taken back."""
    declared = spec.workspace.digest if is_digest(spec.workspace.digest) else ""
    files = [] if known else [f.sha256 for f in spec.workspace.files]
    owned = blob_access.require_readable(s, principal, files, "workspace", also=declared)
    return datasets.pin(s, spec, admission.parse_config(spec)), owned


def _check_request_id(request_id: str) -> None:
    """A request id the ledger can hold: at most MAX_REQUEST_ID characters, none a control
    character (PostgreSQL refused longer ones and NUL bytes only when the batch was written, and
    the caller got INTERNAL; SQLite took them)."""
    if len(request_id) > jobs.MAX_REQUEST_ID or any(c < " " or c == "\x7f" for c in request_id):
        raise errors.InvalidArgument(
            f"request_id must be at most {jobs.MAX_REQUEST_ID} characters, none a control character: "
            f"{request_id[:80]!r}",
            field_violations=(
                errors.FieldViolation("request_id", f"at most {jobs.MAX_REQUEST_ID} printable characters"),
            ),
        )


def _record_key(principal: Principal) -> str:
    """Whose admissions a workspace record speaks for: the user, and whether as an admin (whose
    workspaces are not checked for ownership), so an admin's record never spares a plain token's
    ownership check."""
    return f"{principal.user}\0{'admin' if principal.admin else 'user'}"


def _trimmed(job: job_pb2.Job, by_reference: bool) -> job_pb2.Job:
    """A job submitted by workspace digest is answered without its files (GetJob has them):
    the client named them by digest so as not to move them."""
    if by_reference:
        job.spec.workspace.ClearField("files")
    return job
