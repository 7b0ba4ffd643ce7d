"""A request's pools checked against what an executor kind can ever run (InvalidArgument why not).

Every kind asks the same questions in the same order, with the same messages: is there a pool,
more than one without MULTI_POOL, a known series, a GPU count a node has, a node count the fleet
has (more than one without MULTI_NODE). What the kind's nodes look like comes in as `Shape`s;
a kind that learns its nodes later (agent: from the registry) passes no inventory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from starforge_api.job.v1 import job_spec_pb2 as spec_pb

from common import errors


@dataclass(frozen=True)
class Shape:
    """One series as a kind offers it: how many nodes, GPUs per node."""

    nodes: int
    gpus_per_node: int


@dataclass(frozen=True)
class PoolRules:
    """What one kind can run. `place` finishes "series 'x' is not ...": "on this node"."""

    kind: str
    place: str
    multi_pool: bool = False
    multi_node: bool = False


def _invalid(message: str, field: str, why: str) -> errors.InvalidArgument:
    return errors.InvalidArgument(message, field_violations=(errors.FieldViolation(field, why),))


def check_pools(
    pools: Sequence[spec_pb.Pool], rules: PoolRules, inventory: Mapping[str, Shape] | None = None
) -> list[spec_pb.Pool]:
    """`pools` when this kind can ever run them (node counts of 0 read as 1), else InvalidArgument."""
    if not pools:
        raise _invalid("the request has no pools", "pools", "empty")
    if len(pools) > 1 and not rules.multi_pool:
        raise _invalid(
            f"the {rules.kind} executor runs single-pool jobs; this one has {len(pools)} pools "
            "(multi-pool needs a kuberay or slurm fleet)",
            "pools",
            "exactly one pool",
        )
    for i, pool in enumerate(pools):
        _check_pool(i, pool, rules, inventory)
    return list(pools)


def _check_pool(i: int, pool: spec_pb.Pool, rules: PoolRules, inventory: Mapping[str, Shape] | None) -> None:
    where = f"pools[{i}]"
    nodes = max(1, pool.nodes)
    if pool.gpus_per_node < 0:
        raise _invalid(f"pool {pool.name!r}: gpus_per_node must not be negative", f"{where}.gpus_per_node", "negative")
    if pool.nodes < 0:
        raise _invalid(f"pool {pool.name!r}: nodes must not be negative", f"{where}.nodes", "negative")
    shape = None
    if inventory is not None:
        shape = inventory.get(pool.series)
        if shape is None:
            raise _invalid(
                f"pool {pool.name!r}: series {pool.series!r} is not {rules.place} ({', '.join(inventory)})",
                f"{where}.series",
                "unknown series",
            )
    if nodes > 1 and not rules.multi_node:
        raise _invalid(
            f"pool {pool.name!r} asks for {nodes} nodes; the {rules.kind} executor places one node per job",
            f"{where}.nodes",
            "at most 1",
        )
    if shape is None:
        return
    if pool.gpus_per_node > shape.gpus_per_node:
        has = "this node has" if not rules.multi_node else "its nodes have"
        raise _invalid(
            f"pool {pool.name!r} asks for {pool.gpus_per_node} {pool.series} GPUs per node; "
            f"{has} {shape.gpus_per_node}",
            f"{where}.gpus_per_node",
            f"at most {shape.gpus_per_node}",
        )
    if nodes > shape.nodes:
        raise _invalid(
            f"pool {pool.name!r} asks for {nodes} {pool.series} nodes; this fleet has {shape.nodes}",
            f"{where}.nodes",
            f"at most {shape.nodes}",
        )
