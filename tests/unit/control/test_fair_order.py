"""The fast pass's fair order (placement.fair_order_of_heads) is the reference order, `_fair_order`.

The scheduler's fast pass orders each owner's first job from an index kept between cycles and
keys only the owners with usage; these compare it with the reference computation (every owner
keyed, a heap) over many random states: ties in held capacity, recent usage and seq, several
priority levels, owners with usage but no job, zero-valued usage entries, and whole decisions
(placements, wait reasons, positions) through `placement.decide`.
"""

from __future__ import annotations

import random

import pytest

from control.config import FleetConfig, InventoryConfig, QuotaConfig
from control.scheduler import placement


def _state(rng: random.Random) -> tuple[dict[str, placement.Candidate], placement.Usage]:
    owners = [f"u{i:03d}" for i in range(rng.randint(0, 60))]
    seqs = rng.sample(range(1, 10_000), len(owners))
    heads = {
        o: placement.Candidate(
            job_id=f"j-{o}",
            owner=o,
            project=rng.choice(["p1", "p2"]),
            priority=rng.choice([0, 0, 0, 1, 5, -2]),
            seq=seq,
            needs={rng.choice(["h200", "cpu"]): rng.choice([1, 1, 2, 8])},
        )
        for o, seq in zip(owners, seqs, strict=True)
    }
    usage = placement.Usage()
    for o in [*owners, "gone-1", "gone-2"]:  # owners with usage and no job held too
        r = rng.random()
        if r < 0.4:
            continue  # no usage at all
        if r < 0.5:
            usage.totals[o] = 0  # present, with zero values: the key of an owner without usage
            usage.history[o] = 0.0
            continue
        if r < 0.8:
            usage.totals[o] = rng.choice([0, 1, 2, 8])
        if rng.random() < 0.7:
            usage.history[o] = rng.choice([0.0, 1.0, 2.5, 3600.0, rng.random() * 100])
    return heads, usage


def _index(heads: dict[str, placement.Candidate]) -> list[tuple[int, int, str]]:
    return sorted((-c.priority, c.seq, o) for o, c in heads.items())


@pytest.mark.parametrize("seed", range(8))
def test_fair_order_of_heads_is_the_reference_order(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(250):
        heads, usage = _state(rng)
        reference = [c.job_id for c in placement._fair_order(list(heads.values()), usage)]
        ours = [c.job_id for c in placement.fair_order_of_heads(_index(heads), heads, usage)]
        assert ours == reference


@pytest.mark.parametrize("seed", range(4))
def test_decisions_from_the_index_are_the_reference_decisions(seed: int) -> None:
    rng = random.Random(seed)
    fleets = [
        FleetConfig("gpu", "local", "", inventory=[InventoryConfig("h200", 2, 8)]),
        FleetConfig("cpu", "local", "", inventory=[InventoryConfig("cpu", 1, 0, 4)]),
    ]
    quotas = [QuotaConfig(user="*", series="h200", gpus=8)]
    for _ in range(200):
        heads, usage = _state(rng)
        used = {("gpu", "h200"): rng.randint(0, 16), ("cpu", "cpu"): rng.randint(0, 4)}
        for dispatch_only in (False, True):
            ref_usage = placement.Usage(
                usage.by_user.copy(), usage.by_project.copy(), usage.history, usage.totals.copy()
            )
            reference = placement.decide(
                list(heads.values()),
                placement.capacities(fleets, used, {}),
                ref_usage,
                quotas,
                dispatch_only=dispatch_only,
            )
            our_usage = placement.Usage(
                usage.by_user.copy(), usage.by_project.copy(), usage.history, usage.totals.copy()
            )
            ours = placement.decide(
                placement.fair_order_of_heads(_index(heads), heads, our_usage),
                placement.capacities(fleets, used, {}),
                our_usage,
                quotas,
                dispatch_only=dispatch_only,
                in_fair_order=True,
            )
            assert ours == reference
