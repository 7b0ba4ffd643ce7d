"""Choosing a node and its GPUs for an attempt: pure functions over the registry's node list.

A GPU of a node is busy when the node's last heartbeat says so, or when the agent placed an
attempt on it that the heartbeat may not reflect yet: one whose StartAttempt is still in flight,
or returned less than `grace` seconds before that heartbeat. The agent executor calls `choose`
under one lock and records the placement before releasing it, so two launches can never be handed
the same GPU; forgelet checks again (RESOURCE_EXHAUSTED when a GPU is held) as a last line.

Among the nodes that fit, the one with the fewest free GPUs of the series wins (best fit: whole
nodes stay free for whole-node jobs), then the name. CPU attempts (no GPUs) go to the node with
the fewest attempts running.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from starforge_api.forgelet.v1 import node_pb2

from executor_svc.agent.state import Placement


@dataclass(frozen=True)
class Choice:
    """A node and the GPU indices to use on it."""

    node: str
    gpus: tuple[int, ...]


def heartbeat_time(node: node_pb2.Node) -> float:
    t = node.last_heartbeat_time
    return t.seconds + t.nanos / 1e9


def series_gpus(node: node_pb2.Node, series: str) -> list[int]:
    return sorted(g.index for g in node.gpus if g.series == series)


def _counts(p: Placement, node: node_pb2.Node, in_flight: Collection[str], grace: float) -> bool:
    """Whether placement `p` still holds its GPUs over what `node`'s heartbeat says."""
    return p.attempt_id in in_flight or heartbeat_time(node) < p.placed_at + grace


def busy_gpus(
    node: node_pb2.Node, placements: Iterable[Placement], in_flight: Collection[str], grace: float
) -> set[int]:
    """GPU indices of `node` in use or reserved (module docstring)."""
    busy = set(node.used_gpu_indices)
    for p in placements:
        if p.node == node.name and _counts(p, node, in_flight, grace):
            busy.update(p.gpus)
    return busy


def running_count(
    node: node_pb2.Node, placements: Iterable[Placement], in_flight: Collection[str], grace: float
) -> int:
    running = set(node.running_attempt_ids)
    running.update(p.attempt_id for p in placements if p.node == node.name and _counts(p, node, in_flight, grace))
    return len(running)


def usable(node: node_pb2.Node, now: float, stale_after: float) -> bool:
    """READY and heartbeating recently."""
    return node.state == node_pb2.NODE_STATE_READY and now - heartbeat_time(node) <= stale_after


def choose(
    nodes: Sequence[node_pb2.Node],
    series: str,
    count: int,
    placements: Sequence[Placement],
    in_flight: Collection[str],
    *,
    now: float,
    stale_after: float,
    grace: float,
    exclude: Collection[str] = (),
) -> Choice | None:
    """The best node for `count` GPUs of `series` right now, or None (module docstring)."""
    best: tuple[tuple[int, str], Choice] | None = None
    for node in nodes:
        if node.name in exclude or not usable(node, now, stale_after):
            continue
        if count == 0:
            score = (running_count(node, placements, in_flight, grace), node.name)
            choice = Choice(node.name, ())
        else:
            busy = busy_gpus(node, placements, in_flight, grace)
            free = [g for g in series_gpus(node, series) if g not in busy]
            if len(free) < count:
                continue
            score = (len(free), node.name)
            choice = Choice(node.name, tuple(free[:count]))
        if best is None or score < best[0]:
            best = (score, choice)
    return None if best is None else best[1]


def ever_fits(nodes: Sequence[node_pb2.Node], series: str, count: int) -> bool:
    """Whether some registered node (in any state) has `count` GPUs of `series` at all."""
    return count == 0 or any(len(series_gpus(n, series)) >= count for n in nodes)


def free_gpus(
    node: node_pb2.Node, series: str, placements: Sequence[Placement], in_flight: Collection[str], grace: float
) -> int:
    busy = busy_gpus(node, placements, in_flight, grace)
    return sum(1 for g in series_gpus(node, series) if g not in busy)
