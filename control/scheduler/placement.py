"""Placement: which QUEUED jobs start now, on which fleet, and why the others wait. Pure.

Order: higher priority first; inside a priority level, fair share — the user who holds the least
capacity right now goes next (counting what this cycle already placed), then the one who used
the least recently (decayed GPU-seconds, as Slurm's fair-share factor), FIFO inside a user. A user
with 100 queued jobs therefore cannot starve a user with one. Each job takes the first
eligible, open, undrained fleet with free capacity for all its pools at once (gang: all or
nothing) within its owner's and project's quotas. A job that does not fit records why it waits
and does not block smaller jobs behind it (backfill).
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from starforge_api.job.v1 import job_state_pb2 as st

from control.config import FleetConfig, QuotaConfig


@dataclass(frozen=True)
class Candidate:
    job_id: str
    owner: str
    project: str
    priority: int
    seq: int
    needs: dict[str, int]  # series -> GPUs (CPU series: slots, 1 per job)
    pinned_fleet: str = ""
    nodes: dict[str, int] = field(default_factory=dict)  # series -> nodes needed
    fleets: tuple[str, ...] = ()  # fleets admission found able to run it (empty: any)


@dataclass
class FleetCapacity:
    name: str
    free: dict[str, int]  # series -> free GPUs or slots (a large number when unlimited)
    nodes: dict[str, int]
    usable: bool = True
    why_not: str = ""
    wait_reason: int = st.WAIT_REASON_CAPACITY  # reason to report when this fleet is the blocker


@dataclass
class Usage:
    """Capacity held by active attempts, per (user, series) and (project, series)."""

    by_user: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    by_project: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    # Recent usage per user (GPU-seconds, decayed with a half-life): breaks ties between users
    # holding the same capacity now, so whoever used less lately goes first.
    history: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    totals: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # owner -> all series

    def add(self, owner: str, project: str, needs: dict[str, int]) -> None:
        for s, n in needs.items():
            self.by_user[(owner, s)] += n
            self.by_project[(project, s)] += n
            self.totals[owner] += n

    def total(self, owner: str) -> int:
        return self.totals.get(owner, 0)


@dataclass(frozen=True)
class Decision:
    placed: list[tuple[str, str]]  # (job_id, fleet)
    waiting: dict[str, tuple[int, str]]  # job_id -> (WaitReason, message)
    positions: dict[str, int]  # job_id -> 1-based position among the waiting, in dispatch order
    # Some fleet still had free capacity when a job had to wait (for capacity or quota): jobs
    # behind that one might fit there (backfill), so a decision on owners' heads only is partial.
    backfill: bool = False


UNLIMITED = 1 << 30


def capacities(
    fleets: Sequence[FleetConfig],
    used: dict[tuple[str, str], int],
    unusable: dict[str, str],
    closed: dict[str, tuple[int, str]] | None = None,
) -> list[FleetCapacity]:
    """Free capacity per fleet from its inventory minus what active attempts use.

    `unusable`: fleets whose executor cannot be used (message); `closed`: fleets outside their
    window or drained ((WaitReason, message)).
    """
    closed = closed or {}
    out = []
    for f in fleets:
        free: dict[str, int] = {}
        nodes: dict[str, int] = {}
        for inv in f.inventory:
            if inv.gpus_per_node > 0:
                total = inv.nodes * inv.gpus_per_node
            else:
                total = inv.slots * inv.nodes if inv.slots else UNLIMITED
            free[inv.series] = total - used.get((f.name, inv.series), 0)
            nodes[inv.series] = inv.nodes
        cap = FleetCapacity(f.name, free, nodes)
        if f.name in closed:
            cap.usable, (cap.wait_reason, cap.why_not) = False, closed[f.name]
        elif f.name in unusable:
            cap.usable, cap.why_not = False, unusable[f.name]
        out.append(cap)
    return out


def _quota_block(c: Candidate, usage: Usage, quotas: Sequence[QuotaConfig]) -> str:
    for q in quotas:
        n = c.needs.get(q.series)
        if not n:
            continue
        if q.user in ("*", c.owner):
            held = usage.by_user[(c.owner, q.series)]
            if held + n > q.gpus:
                return f"quota: @{c.owner} uses {held} of {q.gpus} {q.series} GPUs; this job needs {n}"
        if q.project in ("*", c.project):
            held = usage.by_project[(c.project, q.series)]
            if held + n > q.gpus:
                return f"quota: project {c.project} uses {held} of {q.gpus} {q.series} GPUs; this job needs {n}"
    return ""


def _fair_order(candidates: Iterable[Candidate], usage: Usage) -> Iterable[Candidate]:
    """Yield candidates by priority, then least-served owner, then FIFO; usage is read live."""
    by_level: dict[int, dict[str, list[Candidate]]] = {}
    for c in candidates:
        level = by_level.get(c.priority)
        if level is None:
            level = by_level[c.priority] = {}
        q = level.get(c.owner)
        if q is None:
            level[c.owner] = [c]
        else:
            q.append(c)
    totals, history = usage.totals, usage.history
    for priority in sorted(by_level, reverse=True):
        queues = by_level[priority]
        for q in queues.values():
            if len(q) > 1:
                q.sort(key=_seq, reverse=True)
        # (a fast pass has one candidate per owner: this line is most of its cost, keep it plain)
        heap = [(totals.get(o, 0), history.get(o, 0.0), q[-1].seq, o) for o, q in queues.items()]
        heapq.heapify(heap)
        while heap:
            *_, owner = heapq.heappop(heap)
            q = queues[owner]
            yield q.pop()
            if q:
                heapq.heappush(heap, (totals.get(owner, 0), history.get(owner, 0.0), q[-1].seq, owner))


def fair_order_of_heads(
    index: Iterable[tuple[int, int, str]], heads: Mapping[str, Candidate], usage: Usage
) -> Iterator[Candidate]:
    """The order `_fair_order` gives `heads.values()` (one candidate per owner, the scheduler's
    fast pass), without keying every owner each cycle.

    `index` is every head's (-priority, seq, owner), sorted; it changes only when a head does
    (control/scheduler/heads.py keeps it). With one candidate per owner `_fair_order` yields the
    candidates sorted by (-priority, held capacity, recent usage, seq, owner): an owner's usage is
    only changed by placing its one candidate, after which it is not keyed again. An owner holding
    nothing with no recent usage has the key (-priority, 0, 0.0, seq, owner): those come from
    `index` as they are; only the owners with usage are keyed and sorted here, and the two sorted
    streams are merged. The keys are read when this is called: call it before placing anything.
    """
    totals, history = usage.totals, usage.history
    keyed: list[tuple[int, int, float, int, str]] = []
    for owner in set(totals).union(history):
        c = heads.get(owner)
        if c is None:
            continue
        held, recent = totals.get(owner, 0), history.get(owner, 0.0)
        if held == 0 and recent == 0.0:
            continue  # the key of an owner without usage: found in `index`
        keyed.append((-c.priority, held, recent, c.seq, owner))
    keyed.sort()
    if not keyed:
        return (heads[owner] for _, _, owner in index)
    skip = {k[4] for k in keyed}
    idle = ((level, 0, 0.0, seq, owner) for level, seq, owner in index if owner not in skip)
    return (heads[k[4]] for k in heapq.merge(idle, keyed))


def _seq(c: Candidate) -> int:
    return c.seq


def _any_free(fleets: Sequence[FleetCapacity]) -> bool:
    return any(f.usable and any(n > 0 for n in f.free.values()) for f in fleets)


def decide(
    candidates: Iterable[Candidate],
    fleets: list[FleetCapacity],
    usage: Usage | None = None,
    quotas: Sequence[QuotaConfig] = (),
    *,
    dispatch_only: bool = False,
    in_fair_order: bool = False,
) -> Decision:
    """Place what fits, in fair order; say why each other candidate waits and its position.

    `dispatch_only`: only the placements matter (the scheduler's fast pass): stop as soon as no
    usable fleet has free capacity left, and leave `waiting`/`positions` incomplete.
    `in_fair_order`: `candidates` already come in the order `_fair_order` would give them for
    `usage` (`fair_order_of_heads`), and are taken as they come.
    """
    usage = usage or Usage()
    placed: list[tuple[str, str]] = []
    waiting: dict[str, tuple[int, str]] = {}
    positions: dict[str, int] = {}
    if dispatch_only and not _any_free(fleets):
        return Decision(placed, waiting, positions)
    for c in candidates if in_fair_order else _fair_order(candidates, usage):
        blocked = _quota_block(c, usage, quotas)
        if blocked:
            waiting[c.job_id] = (st.WAIT_REASON_QUOTA, blocked)
            positions[c.job_id] = len(positions) + 1
            continue
        chosen = None
        reasons: list[tuple[int, str]] = []
        for f in fleets:
            if (c.pinned_fleet and f.name != c.pinned_fleet) or (c.fleets and f.name not in c.fleets):
                continue
            if not all(series in f.free for series in c.needs):
                continue
            if any(c.nodes.get(s, 1) > f.nodes.get(s, 0) for s in c.needs):
                continue
            if not f.usable:
                reasons.append((f.wait_reason, f.why_not))
                continue
            short = [s for s, n in c.needs.items() if f.free[s] < n]
            if short:
                s = short[0]
                reasons.append(
                    (
                        st.WAIT_REASON_CAPACITY,
                        f"fleet {f.name} has {max(f.free[s], 0)} free {s} of the {c.needs[s]} needed",
                    )
                )
                continue
            chosen = f
            break
        if chosen is None:
            reason = next((r for r, _ in reasons if r != st.WAIT_REASON_CAPACITY), st.WAIT_REASON_CAPACITY)
            labels: dict[int, str] = {st.WAIT_REASON_WINDOW: "window", st.WAIT_REASON_DRAIN: "drain"}
            label = labels.get(reason, "capacity")
            msg = "; ".join(m for _, m in reasons) or "no fleet has the machines this job needs"
            waiting[c.job_id] = (reason, f"{label}: {msg}")
            positions[c.job_id] = len(positions) + 1
            continue
        for s, n in c.needs.items():
            chosen.free[s] -= n
        usage.add(c.owner, c.project, c.needs)
        placed.append((c.job_id, chosen.name))
        if dispatch_only and not _any_free(fleets):
            break
    return Decision(placed, waiting, positions, backfill=bool(waiting) and _any_free(fleets))
