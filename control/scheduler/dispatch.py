"""The scheduler loop: place QUEUED jobs, claim them as attempts, and launch them on executors.

Claiming (QUEUED -> SUBMITTED, the attempt row, its run token and its LaunchRequest) is one
transaction; the executor call comes after the commit. A crash between the two leaves a
SUBMITTED attempt with its LaunchRequest stored: the reconciler re-sends the same request when
the lease runs out, and the executor's launch is idempotent per attempt id, so a job is never lost
and never launched twice. A launch the executor refuses as full (RESOURCE_EXHAUSTED: it took
nothing) is sent again by the scheduler itself once its backoff ends. On PostgreSQL the job rows
are locked with FOR UPDATE SKIP LOCKED, so two replicas never claim the same job.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.orm import Session
from starforge_api.executor.v1 import launch_request_pb2 as lr
from starforge_api.job.v1 import job_pb2, job_spec_pb2
from starforge_api.job.v1 import job_state_pb2 as st

from common import errors
from control import assembly, datasets, launch_secrets, metrics, windows
from control.config import FleetConfig
from control.context import Context
from control.db import engine
from control.db import models as m
from control.ledger import convert, jobs, outcomes
from control.ledger import state_machine as sm
from control.scheduler import backoff, heads, leader, placement
from recipes.catalog import RecipeDecl

log = logging.getLogger("starforge.scheduler")
DRAINED = 2  # starforge.control.v1.FLEET_STATE_DRAINED

PER_OWNER = 50  # QUEUED jobs per owner looked at per cycle
# A cycle looks at every owner's first PER_OWNER jobs (a full pass: placements, then every
# candidate's wait reason and queue position) while the queue is small. Past FULL_PASS_CANDIDATES
# candidates, a cycle first decides on each owner's head of line only (a fast pass, enough when
# capacity runs out, the usual case with a big queue; the heads are held in memory and refreshed
# from what changed, heads.py) and makes a full pass only when a fleet kept free capacity that a
# job behind a waiting head might use (backfill), or when the wait reasons are
# STATUS_REFRESH_SECONDS old. At 1,000,000 queued jobs of 1,000 users that is ~50,000 candidates:
# reading them from the ledger takes about a second of the single database thread, so full passes
# decide on the jobs held in memory and the ledger is read once per LEDGER_PASS_SECONDS
# (bench/queue_scale.py).
FULL_PASS_CANDIDATES = 2_000
STATUS_REFRESH_SECONDS = 5.0
# With a big queue, full passes decide on the heads held in memory (every owner's first PER_OWNER
# jobs, kept up to date from what changed, heads.py); the held jobs are read again from the ledger
# every LEDGER_PASS_SECONDS, the backstop for what another replica changed (a job it stopped or
# queued again without a backoff: a claim re-checks every job, so this only delays a wait reason
# or a queue position, or a job queued again there until a scheduler that saw it places it).
LEDGER_PASS_SECONDS = 60.0
# A full pass writes every candidate's wait reason and queue position (jobs.set_wait): when the
# queue moves, every position behind it changes, so with a big queue that is a write of every
# held job (~50,000 rows at 1,000,000 queued of 1,000 owners, about a second of the database
# thread). With a big queue a full pass writes them only once STATUS_COST_FACTOR times the last
# write's duration has passed since it, so they take at most about 1 / (1 + STATUS_COST_FACTOR)
# of the database thread (at 1,000,000 queued: every ~10 s instead of every full pass, which with
# free capacity to backfill is every cycle). A small queue's full passes all write, as before.
STATUS_COST_FACTOR = 10.0
# Decisions a cycle makes at most when fast-pass heads turn out stale (their claim finds the job gone).
MAX_DECISIONS = 3
LEASE_SECONDS = 60.0
# A cycle woken by a notification (a submission, a finished attempt) starts no sooner than
# COALESCE_MIN_SECONDS after the last cycle ended (or COALESCE_FACTOR times that cycle's duration,
# when longer), and never later than COALESCE_MAX_SECONDS after: a storm of submissions then
# shares one cycle per COALESCE_MIN_SECONDS at most instead of waking one per group commit, and a
# long cycle (a big queue) keeps the scheduler to about 1 / (1 + COALESCE_FACTOR) of the database
# thread. A notification that comes later than that after the last cycle (an idle console's lone
# submission) starts its cycle at once. The admission benchmark: cycles were 28 % of the console's
# CPU during a storm with one per submission, 17-20 % with the factor alone (a cycle of a few ms
# on a quiet machine may then run every 20 ms or so).
COALESCE_FACTOR = 8.0
COALESCE_MIN_SECONDS = 0.05
COALESCE_MAX_SECONDS = 0.1
CLASS_NAMES = frozenset(n.removeprefix("FAILURE_CLASS_") for n in st.FailureClass.keys())  # noqa: SIM118
MAX_DISPATCH_TRIES = 8
# How long an attempt may wait for a full backend (ResourceExhausted) before it fails as INFRA.
BACKEND_FULL_SECONDS = 600.0


@dataclass(frozen=True)
class _CycleContext:
    """Fleets, capacity in use and usage as a cycle read them; each decision takes fresh copies."""

    fleets: list[FleetConfig]
    used: dict[tuple[str, str], int]
    held: placement.Usage
    unusable: dict[str, str]
    closed: dict[str, tuple[int, str]]

    def capacities(self) -> list[placement.FleetCapacity]:
        return placement.capacities(self.fleets, self.used, self.unusable, self.closed)

    def usage(self) -> placement.Usage:
        u = self.held
        return placement.Usage(u.by_user.copy(), u.by_project.copy(), u.history, u.totals.copy())


@dataclass(frozen=True)
class Claimed:
    attempt_id: str
    job_id: str
    fleet: str
    launch: bytes


def _candidates(s: Session, now: float, per_owner: int = PER_OWNER) -> list[placement.Candidate]:
    """QUEUED jobs to consider: each owner's first `per_owner` in their own order (so one user's
    huge backlog never hides another user's job from the scheduler). The query (heads.CANDIDATES)
    walks the owners through ix_jobs_state_owner_order instead of ranking the whole queue."""
    return heads.HeadCache(None, per_owner).load(s, now)


# Statements of every cycle, built once (plain SQL: building and caching an ORM select each
# cycle cost more than running it; bench/queue_scale.py profile).
_ACTIVE_STATES = ", ".join(str(int(x)) for x in sorted(sm.ACTIVE))
# (run by engine.read_rows: plain DBAPI reads, `?` marks)
_HELD = (
    "SELECT a.fleet, a.needs, j.owner, j.project FROM attempts a JOIN jobs j ON j.id = a.job_id "  # noqa: S608
    f"WHERE a.state IN ({_ACTIVE_STATES})"  # constant states
)
# through ix_attempts_ended_at (migration 0012): attempts still going or ended since `?`
_RECENT = (
    "SELECT j.owner, a.needs, a.created_at, a.ended_at FROM attempts a JOIN jobs j ON j.id = a.job_id "
    "WHERE a.ended_at IS NULL OR a.ended_at > ?"
)
_DRAINED = f"SELECT name, reason FROM fleet_states WHERE state = {DRAINED}"  # noqa: S608 (a constant)


def used_capacity(s: Session, half_life: float = 3600.0) -> tuple[dict[tuple[str, str], int], placement.Usage]:
    """Capacity held by active attempts: per (fleet, series), and per user/project for quotas;
    plus each user's recent usage (GPU-seconds decayed with `half_life`) for fair share."""
    used: dict[tuple[str, str], int] = {}
    usage = placement.Usage()
    for fleet, needs, owner, project in engine.read_rows(s, _HELD):
        n = _needs(needs)
        for series, count in n.items():
            used[(fleet, series)] = used.get((fleet, series), 0) + count
        usage.add(owner, project, n)
    now = time.time()
    for owner, needs, created, ended in engine.read_rows(s, _RECENT, (now - 8 * half_life,)):
        size = sum(_needs(needs).values())
        end = ended if ended is not None else now
        # at least one second per attempt: even a job that failed at once took its turn
        usage.history[owner] += size * max(1.0, end - created) * 0.5 ** ((now - end) / half_life)
    return used, usage


@functools.lru_cache(maxsize=1024)
def _parsed_needs(doc: str) -> tuple[tuple[str, int], ...]:
    return tuple((k, int(v)) for k, v in json.loads(doc).items())


def _needs(doc: str | None) -> dict[str, int]:
    """An attempt's `needs` column (series -> count); the few distinct texts are parsed once."""
    return dict(_parsed_needs(doc or "{}"))


def closed_fleets(s: Session, ctx: Context) -> dict[str, tuple[int, str]]:
    """Fleets that take no new work now: drained, or outside their time window."""
    out: dict[str, tuple[int, str]] = {}
    drained = {name: reason for name, reason in engine.read_rows(s, _DRAINED)}
    for f in ctx.cfg.fleets:
        if f.name in drained:
            out[f.name] = (st.WAIT_REASON_DRAIN, f"fleet {f.name} is drained ({drained[f.name] or 'maintenance'})")
        elif not windows.is_open(f.window):
            out[f.name] = (st.WAIT_REASON_WINDOW, f"fleet {f.name} runs jobs only {f.window}")
    return out


class Scheduler:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._tasks: set[asyncio.Task[None]] = set()
        self._launch_slots = asyncio.Semaphore(32)
        self._big_queue = False  # the last full pass had more than FULL_PASS_CANDIDATES candidates
        self._status_at = 0.0  # when the last full pass decided every candidate's wait reason
        self._written_at = 0.0  # when wait reasons and positions were last written (a full pass)
        self._write_cost = 0.0  # how long that write took (seconds; see STATUS_COST_FACTOR)
        self._ledger_at = 0.0  # when the held heads were last read from the ledger (heads.load)
        # Each owner's first PER_OWNER jobs as of the last full pass, kept up to date from what
        # changed since: the fast pass reads no queue rows (heads.py).
        self.heads = heads.HeadCache(ctx.db.queue_changes, PER_OWNER)
        # Among replicas on PostgreSQL only one runs placement cycles (leader.py).
        self.leadership = leader.Leadership(ctx.db)

    # -- placement and claim (one transaction) -------------------------------------------------

    def _claim(self, s: Session, job_id: str, fleet: str, now: float) -> Claimed | None:
        """Claim a QUEUED job for `fleet`: its next attempt (SUBMITTED) with the LaunchRequest
        stored and ready to send; None when the job is gone or its attempt failed at once."""
        job = self._lock_queued(s, job_id, now)
        if job is None:
            return None  # another replica took it, or it was stopped or put in backoff meanwhile
        fleet_cfg = self.ctx.cfg.fleet(fleet)
        recipe = self.ctx.catalog.get(job.method)
        metrics.QUEUE_WAIT_SECONDS.observe(max(0.0, now - job.updated_at))
        attempt = self._new_attempt(s, job, fleet, fleet_cfg.kind if fleet_cfg else "", now)
        if recipe is None or fleet_cfg is None:
            what = f"method {job.method} is no longer published" if recipe is None else f"fleet {fleet} is gone"
            outcomes.finish_attempt(
                s, job, attempt, exit_code=None, known_class=st.FAILURE_CLASS_PRECHECK, message=what, now=now
            )
            return None
        launch = self._launch_request(s, job, attempt, recipe)
        attempt.launch = launch_secrets.stored_form(launch)
        data = launch_secrets.send_form_or_fail(s, attempt, self.ctx.keyring, built=(launch, job))
        if data is None:
            return None
        _record_digests(job, attempt, launch)
        return Claimed(attempt.id, job.id, fleet, data)

    def _lock_queued(self, s: Session, job_id: str, now: float) -> m.Job | None:
        """The job if it is still QUEUED and out of backoff, row-locked on PostgreSQL (skipped if
        another replica holds it). The decision may come from heads held in memory: this is the
        check that makes a stale one harmless."""
        stmt = select(m.Job).where(m.Job.id == job_id, m.Job.state == sm.QUEUED, m.Job.not_before <= now)
        if not self.ctx.db.sqlite:
            stmt = stmt.with_for_update(skip_locked=True)
        return s.scalars(stmt).one_or_none()

    def _new_attempt(self, s: Session, job: m.Job, fleet: str, executor_kind: str, now: float) -> m.Attempt:
        """The job's next attempt on `fleet`, leased to this replica (job and attempt SUBMITTED)."""
        return jobs.new_attempt(
            s,
            job,
            fleet,
            f"dispatched to fleet {fleet}",
            now=now,
            cause=job.next_cause or job_pb2.ATTEMPT_CAUSE_INITIAL,
            executor_kind=executor_kind,
            series=job.series,
            gpus=job.gpus,
            needs=json.dumps(json.loads(job.needs or "{}").get("gpus", {})),
            lease_owner=self.ctx.replica_id,
            lease_until=now + LEASE_SECONDS,
        )

    def _launch_request(self, s: Session, job: m.Job, attempt: m.Attempt, recipe: RecipeDecl) -> lr.LaunchRequest:
        """What assembly builds for the attempt, from the job row and the server's config."""
        spec = job_spec_pb2.JobSpec()
        spec.ParseFromString(job.spec)
        root = _pipeline_root(s, job)
        info = assembly.AttemptInfo(
            job.id,
            attempt.id,
            attempt.number,
            job.owner,
            job.project,
            resume=attempt.number > 1 or root.id != job.id,
            stage=job.stage,
            out_key=root.id if root.id != job.id else "",
        )
        return assembly.build_launch(
            info,
            spec,
            convert.pools_from_bytes(job.pools),
            recipe,
            json.loads(job.resolved_config or "{}"),
            job.image,
            job.runtime_id,
            self.ctx.assets,
            self.ctx.store,
            public_address=self.ctx.public_address,
            public_http_url=self.ctx.public_http_url,
            public_ingest_address=self.ctx.public_ingest_address,
            ca_pem=self.ctx.ca_pem,
            stop_grace_seconds=self.ctx.cfg.stop_grace_seconds,
            datasets=datasets.resolved(s, spec),
        )

    def decide(self, s: Session, now: float) -> tuple[placement.Decision, bool]:
        """This cycle's placement decision, and whether it was a full pass (see PER_OWNER).

        With a big queue the candidates come from the heads held in memory (heads.py), read
        again from the ledger every LEDGER_PASS_SECONDS (or when changes were lost): a fast pass
        decides on each owner's first job, a full pass on every held job."""
        memory = self._big_queue and self.heads.ready and now - self._ledger_at < LEDGER_PASS_SECONDS
        if memory:
            self.heads.refresh(s, now)
            memory = self.heads.ready  # false when changes were lost: read everything
        context = None
        if memory and now - self._status_at < STATUS_REFRESH_SECONDS:
            if not self.heads.owners():
                self._big_queue = False
                return placement.Decision([], {}, {}), True
            context = self._context(s)
            usage = context.usage()
            fast = placement.decide(
                self.heads.fair_heads(usage),
                context.capacities(),
                usage,
                self.ctx.cfg.quotas,
                dispatch_only=True,
                in_fair_order=True,
            )
            if not fast.backfill:
                return fast, False
        if memory:
            self.heads.fill(s, now)
            candidates = self.heads.held()
        else:
            candidates = self.heads.load(s, now)
            self._ledger_at = now
        if not candidates:
            self._big_queue = False
            return placement.Decision([], {}, {}), True
        self._big_queue = len(candidates) > FULL_PASS_CANDIDATES
        context = context or self._context(s)
        return placement.decide(candidates, context.capacities(), context.usage(), self.ctx.cfg.quotas), True

    def _context(self, s: Session) -> _CycleContext:
        """What a cycle's decision depends on besides its candidates, read once per cycle."""
        unusable = {
            name: status.why_unusable() for name, status in self.ctx.executors.status.items() if status.why_unusable()
        }
        used, usage = used_capacity(s, self.ctx.cfg.fair_share_half_life_seconds)
        return _CycleContext(self.ctx.cfg.fleets, used, usage, unusable, closed_fleets(s, self.ctx))

    def _place(self, s: Session) -> list[Claimed]:
        now = time.time()
        claimed = []
        for _ in range(MAX_DECISIONS):
            decision, full = self.decide(s, now)
            lost = False
            for job_id, fleet in decision.placed:
                c = self._claim(s, job_id, fleet, now)
                if c is not None:
                    claimed.append(c)
                else:
                    lost = True
            # claimed, gone or held by another replica: the heads read each one again
            self.heads.recheck(j for j, _ in decision.placed)
            if full:
                self._status_at = now
                if not self._big_queue or now - self._written_at >= STATUS_COST_FACTOR * self._write_cost:
                    started = time.perf_counter()
                    jobs.set_wait(
                        s, {j: (r, msg, decision.positions.get(j, 0)) for j, (r, msg) in decision.waiting.items()}
                    )
                    self._write_cost = time.perf_counter() - started
                    self._written_at = now
                break
            if not lost:
                break
            # a head held in memory had left the queue (another replica took it, or it was
            # stopped): decide again on the refreshed heads for the capacity it left free
        return claimed

    async def tick(self) -> int:
        try:
            claimed = await self.ctx.db.run(self._place)
        except BaseException:
            # rolled back: the heads' reads may have seen this transaction's own claims, now undone
            self.heads.ready = False
            raise
        for c in claimed:
            self.ctx.notifier.notify(c.job_id)
            self.spawn(self.launch(c.attempt_id, c.job_id, c.fleet, c.launch))
        return len(claimed)

    def spawn(self, coro: object) -> None:
        task = asyncio.ensure_future(coro)  # type: ignore[call-overload]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- launch --------------------------------------------------------------------------------

    async def launch(self, attempt_id: str, job_id: str, fleet: str, data: bytes) -> None:
        request = lr.LaunchRequest()
        request.ParseFromString(data)
        async with self._launch_slots:
            started = time.monotonic()
            failure: errors.StarforgeError | None = None
            transient = False
            try:
                resp = await self.ctx.executors.launch(fleet, request)
            except (errors.Unavailable, errors.DeadlineExceeded, errors.ResourceExhausted) as e:
                # ResourceExhausted: the backend is momentarily full (our accounting frees a slot
                # when the command exits, the backend when the capsule has drained): wait, retry.
                failure, transient = e, True
            except errors.StarforgeError as e:
                failure = e
            except Exception as e:  # an unexpected bug must not lose the attempt
                log.exception("launch of %s failed unexpectedly", attempt_id)
                failure, transient = errors.Internal(str(e)), True
            if failure is not None:
                metrics.LAUNCH_FAILURES.labels(fleet, type(failure).__name__).inc()
            if failure is None:
                metrics.DISPATCH_SECONDS.labels(fleet).observe(time.monotonic() - started)
                await self.ctx.db.run(lambda s: self._launched(s, attempt_id, resp))
            elif transient:
                retry_in = await self.ctx.db.run(lambda s: self._launch_transient(s, attempt_id, failure))
                if retry_in is not None and isinstance(failure, errors.ResourceExhausted):
                    # The executor answered that it is full: it did not take the attempt, so the
                    # launch is sent again once the backoff ends, by this replica, without waiting
                    # for the reconciler to look (nothing may wake it before its next pass).
                    self.spawn(self._resend_later(attempt_id, job_id, fleet, retry_in))
            else:
                await self.ctx.db.run(lambda s: self._launch_refused(s, attempt_id, failure))
        # A launched attempt is observed at once (PENDING -> RUNNING as soon as the executor sees
        # it up) rather than at the reconciler's next interval, which was most of submit -> RUNNING.
        if failure is None:
            self.ctx.notifier.notify(job_id, "reconcile")
        else:
            self.ctx.notifier.notify(job_id)

    def _launched(self, s: Session, attempt_id: str, resp: object) -> None:
        attempt = jobs.get_attempt(s, attempt_id, for_update=True)
        job = jobs.get_job(s, attempt.job_id, for_update=True)
        attempt.backend_handle = getattr(resp, "backend_handle", "") or attempt.backend_handle
        attempt.node = getattr(resp, "node", "") or attempt.node
        attempt.lease_owner, attempt.lease_until = "", 0.0
        if getattr(resp, "out_dir", ""):
            job.out_dir = resp.out_dir  # type: ignore[attr-defined]
        note_image_digest(job, getattr(resp, "image_digest", ""))
        if attempt.state == sm.SUBMITTED:
            jobs.advance(s, job, attempt, sm.PENDING, "launched: the backend accepted the attempt")

    def _launch_transient(self, s: Session, attempt_id: str, err: errors.StarforgeError) -> float | None:
        """Schedule the launch's retry (in the lease, so every replica keeps to it); the seconds
        until it is due, or None when the attempt ended (meanwhile, or now: out of tries)."""
        attempt = jobs.get_attempt(s, attempt_id, for_update=True)
        if attempt.state != sm.SUBMITTED:
            return None
        full = isinstance(err, errors.ResourceExhausted)
        if not full:
            attempt.dispatch_tries += 1
        expired = full and time.time() - attempt.created_at > BACKEND_FULL_SECONDS
        if attempt.dispatch_tries >= MAX_DISPATCH_TRIES or expired:
            job = jobs.get_job(s, attempt.job_id, for_update=True)
            outcomes.finish_attempt(
                s,
                job,
                attempt,
                exit_code=None,
                known_class=st.FAILURE_CLASS_INFRA,
                message=(
                    f"could not launch on fleet {attempt.fleet} after {attempt.dispatch_tries} tries: {err.message}"
                ),
            )
            return None
        # Let the reconciler retry after a backoff; it re-sends the same LaunchRequest. The
        # schedule lives in the lease, so every replica keeps to it.
        now = time.time()
        if full:
            delay = backoff.LAUNCH_FULL.delay(backoff.LAUNCH_FULL.tries_after(now - attempt.created_at))
        else:
            delay = backoff.LAUNCH.delay(attempt.dispatch_tries)
        attempt.lease_owner = ""
        attempt.lease_until = now + delay
        attempt.reason = f"launch will be retried: {err.message}"
        return delay

    async def _resend_later(self, attempt_id: str, job_id: str, fleet: str, delay: float) -> None:
        """Send a launch the backend refused as full again after `delay` seconds, unless the
        attempt moved on meanwhile (stopped, or re-sent by the reconciler of some replica)."""
        await asyncio.sleep(delay)
        data = await self.ctx.db.run(lambda s: self._retake(s, attempt_id))
        if data is not None:
            await self.launch(attempt_id, job_id, fleet, data)

    def _retake(self, s: Session, attempt_id: str) -> bytes | None:
        """The attempt's LaunchRequest to send again (a fresh run token, its secrets resolved
        again) once this replica holds its expired lease; None when the attempt is no longer
        SUBMITTED, another holds the lease, or a secret it names is gone (it failed, a precheck)."""
        if not take_lease(s, attempt_id, self.ctx.replica_id, time.time()):
            return None
        return launch_secrets.send_form_or_fail(s, jobs.get_attempt(s, attempt_id), self.ctx.keyring)

    def _launch_refused(self, s: Session, attempt_id: str, err: errors.StarforgeError) -> None:
        attempt = jobs.get_attempt(s, attempt_id, for_update=True)
        if attempt.state != sm.SUBMITTED:
            return
        job = jobs.get_job(s, attempt.job_id, for_update=True)
        msg = err.message
        # executors name the class in ErrorInfo metadata (IMAGE for a missing image, ...)
        named = err.metadata.get("failure_class", "")
        if named in CLASS_NAMES:
            cls = st.FailureClass.Value(f"FAILURE_CLASS_{named}")
        elif isinstance(err, errors.Internal):
            # INTERNAL/UNKNOWN: the backend broke, the job did nothing wrong; retryable within budget.
            cls = st.FAILURE_CLASS_INFRA
        else:
            cls = st.FAILURE_CLASS_PRECHECK
        what = "failed" if cls == st.FAILURE_CLASS_INFRA else "refused"
        outcomes.finish_attempt(
            s,
            job,
            attempt,
            exit_code=None,
            known_class=cls,
            message=f"the executor {what} the launch: {msg}",
        )

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                if await self._leading():
                    await self.tick()
            except errors.Unavailable as e:  # the database is down: say so, without a traceback
                log.warning("scheduler cycle skipped: %s", e.message)
            except Exception:
                log.exception("scheduler cycle failed")
            ended = time.monotonic()
            if await self.ctx.notifier.wait("schedule", self.ctx.cfg.scheduler_interval_seconds):
                # coalesce a burst of notifications (see COALESCE_FACTOR); the cycle after the
                # pause sees every notification of the pause
                gap = coalesce_gap(ended - started)
                await asyncio.sleep(max(0.0, ended + gap - time.monotonic()))

    async def _leading(self) -> bool:
        """Whether this replica cycles now (leader.py); one that has just become the leader reads
        the queue afresh: its heads did not follow what other replicas did meanwhile."""
        leading = await self.leadership.leading()
        if self.leadership.changed:
            self.leadership.changed = False
            self.heads.ready = False
            self._big_queue = False
        return leading

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.leadership.close()


def coalesce_gap(duration: float) -> float:
    """How long after a cycle of `duration` seconds ended a notified cycle may start (see
    COALESCE_MIN_SECONDS)."""
    return min(COALESCE_MAX_SECONDS, max(COALESCE_MIN_SECONDS, COALESCE_FACTOR * duration))


def _pipeline_root(s: Session, job: m.Job) -> m.Job:
    """The first job of the pipeline `job` is a stage of (the job itself when it is none)."""
    root = job
    while root.parent_job_id:
        root = jobs.get_job(s, root.parent_job_id)
    return root


def _record_digests(job: m.Job, attempt: m.Attempt, launch: lr.LaunchRequest) -> None:
    """The first attempt's runner and capsule digests become the run's provenance."""
    attempt.capsule_digest = launch.capsule.capsule_digest
    if attempt.number != 1:
        return
    prov = job_spec_pb2.Provenance()
    prov.ParseFromString(job.provenance)
    prov.runner_digest = launch.capsule.runner_digest
    prov.capsule_digest = launch.capsule.capsule_digest
    job.provenance = prov.SerializeToString()


def queue_position(s: Session, job: m.Job) -> int:
    """1-based position of a QUEUED job in dispatch order (the scheduler's, fair share included;
    FIFO within priority for a job the scheduler has not ranked yet, 0 (unknown) when that is
    past jobs.AHEAD_COUNTED)."""
    if job.state != sm.QUEUED:
        return 0
    if job.queue_position:
        return job.queue_position
    ahead = jobs.count_ahead(s, job.queue, job.priority, job.seq)
    return 0 if ahead is None else ahead + 1


def queue_positions(s: Session, rows: Sequence[m.Job]) -> dict[str, int]:
    """`queue_position` of each of `rows` (a page of a listing), by job id. The unranked ones of
    one (queue, priority) are counted in seq order until one is past jobs.AHEAD_COUNTED: the jobs
    after it are further back still, so they are not counted (a page of 1,000 such jobs at
    1,000,000 queued was 1,000 counts of 10,000 entries, 1.3-1.8 s of the database thread)."""
    out: dict[str, int] = {}
    past: set[tuple[str, int]] = set()
    for job in sorted(rows, key=lambda j: j.seq):
        unranked = job.state == sm.QUEUED and not job.queue_position
        if unranked and (job.queue, job.priority) in past:
            out[job.id] = 0
            continue
        out[job.id] = queue_position(s, job)
        if unranked and out[job.id] == 0:
            past.add((job.queue, job.priority))
    return out


def take_lease(s: Session, attempt_id: str, owner: str, now: float) -> bool:
    """Take an expired dispatch lease; True when this replica now holds it."""
    r = s.execute(
        update(m.Attempt)
        .where(m.Attempt.id == attempt_id, m.Attempt.state == sm.SUBMITTED, m.Attempt.lease_until < now)
        .values(lease_owner=owner, lease_until=now + LEASE_SECONDS)
    )
    return bool(r.rowcount)  # type: ignore[attr-defined]


def note_image_digest(job: m.Job, digest: str) -> None:
    """Record the image digest an executor reported (at launch, or observed once the attempt ran)
    in the job's provenance, unless it already has one. A digest the executor could not resolve
    (`unresolved:...`) gives way to a resolved one reported later."""
    if not digest:
        return
    prov = job_spec_pb2.Provenance()
    prov.ParseFromString(job.provenance)
    current = prov.image_digest
    if current and not (current.startswith("unresolved:") and not digest.startswith("unresolved:")):
        return
    prov.image_digest = digest
    job.provenance = prov.SerializeToString()
