"""Placement: which QUEUED jobs start now, on which fleet, and why the others wait. Pure.

Jobs are considered in dispatch order (see `order`); each takes the first eligible fleet with
enough free capacity for all its pools at once (gang: all pools or none). A job that does not fit
records why it waits; it does not block smaller jobs behind it (backfill).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from starforge.job.v1 import job_state_pb2 as st

from control.config import FleetConfig


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


@dataclass
class FleetCapacity:
    name: str
    free: dict[str, int]  # series -> free GPUs or slots (a large number when unlimited)
    nodes: dict[str, int]
    usable: bool = True
    why_not: str = ""


@dataclass(frozen=True)
class Decision:
    placed: list[tuple[str, str]]  # (job_id, fleet)
    waiting: dict[str, tuple[int, str]]  # job_id -> (WaitReason, message)


UNLIMITED = 1 << 30


def capacities(
    fleets: Sequence[FleetConfig], used: dict[tuple[str, str], int], unusable: dict[str, str]
) -> list[FleetCapacity]:
    """Free capacity per fleet from its inventory minus what active attempts use."""
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
        out.append(FleetCapacity(f.name, free, nodes, f.name not in unusable, unusable.get(f.name, "")))
    return out


def decide(candidates: Iterable[Candidate], fleets: list[FleetCapacity]) -> Decision:
    placed: list[tuple[str, str]] = []
    waiting: dict[str, tuple[int, str]] = {}
    for c in candidates:
        chosen = None
        reasons = []
        for f in fleets:
            if c.pinned_fleet and f.name != c.pinned_fleet:
                continue
            if not all(series in f.free for series in c.needs):
                continue
            if any(c.nodes.get(s, 1) > f.nodes.get(s, 0) for s in c.needs):
                continue
            if not f.usable:
                reasons.append(f.why_not)
                continue
            short = [s for s, n in c.needs.items() if f.free[s] < n]
            if short:
                s = short[0]
                reasons.append(f"fleet {f.name} has {max(f.free[s], 0)} free {s} of the {c.needs[s]} needed")
                continue
            chosen = f
            break
        if chosen is None:
            msg = "; ".join(reasons) or "no fleet has the machines this job needs"
            waiting[c.job_id] = (st.WAIT_REASON_CAPACITY, f"capacity: {msg}")
            continue
        for s, n in c.needs.items():
            chosen.free[s] -= n
        placed.append((c.job_id, chosen.name))
    return Decision(placed, waiting)
