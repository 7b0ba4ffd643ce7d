"""Placement across forgelet nodes: heartbeats + the agent's own reservations, never double-booked."""

from __future__ import annotations

import pathlib

from starforge_api.forgelet.v1 import node_pb2

from executor_svc.agent import placement
from executor_svc.agent.state import Placement, PlacementBook

NOW = 1_000_000.0
GRACE = 5.0


def node(
    name: str,
    gpus: int = 8,
    *,
    series: str = "h200",
    used: tuple[int, ...] = (),
    running: tuple[str, ...] = (),
    state: int = node_pb2.NODE_STATE_READY,
    heartbeat: float = NOW - 1,
) -> node_pb2.Node:
    n = node_pb2.Node(
        name=name,
        address=f"127.0.0.1:{len(name)}",
        gpus=[node_pb2.Gpu(index=i, series=series, uuid=f"cfg-{name}-{i}") for i in range(gpus)],
        state=state,  # type: ignore[arg-type]
        used_gpu_indices=used,
        running_attempt_ids=running,
        fleet="f",
    )
    n.last_heartbeat_time.FromNanoseconds(int(heartbeat * 1e9))
    return n


def choose(
    nodes: list[node_pb2.Node], count: int, placements: list[Placement], **kw: object
) -> placement.Choice | None:
    args: dict[str, object] = {"now": NOW, "stale_after": 8.0, "grace": GRACE}
    args.update(kw)
    in_flight = args.pop("in_flight", ())
    return placement.choose(nodes, "h200", count, placements, in_flight, **args)  # type: ignore[arg-type]


def test_three_four_gpu_jobs_on_two_eight_gpu_nodes_never_double_book() -> None:
    nodes = [node("n1"), node("n2")]
    placements: list[Placement] = []
    for i in range(3):
        c = choose(nodes, 4, placements, in_flight={p.attempt_id for p in placements})
        assert c is not None
        placements.append(Placement(f"a.{i}", c.node, "h200", list(c.gpus), placed_at=NOW))
    # best fit: the second job fills n1, the third goes to n2
    assert [(p.node, p.gpus) for p in placements] == [
        ("n1", [0, 1, 2, 3]),
        ("n1", [4, 5, 6, 7]),
        ("n2", [0, 1, 2, 3]),
    ]
    # a fourth fits only in n2's other half; a fifth fits nowhere
    c = choose(nodes, 4, placements)
    assert c == placement.Choice("n2", (4, 5, 6, 7))
    placements.append(Placement("a.3", c.node, "h200", list(c.gpus), placed_at=NOW))
    assert choose(nodes, 4, placements) is None
    assert choose(nodes, 1, placements) is None


def test_heartbeat_used_gpus_and_reservation_grace() -> None:
    # n1 reports GPUs 0-5 used; only 6 and 7 are free
    n1 = node("n1", used=(0, 1, 2, 3, 4, 5), heartbeat=NOW - 1)
    assert choose([n1], 2, []) == placement.Choice("n1", (6, 7))
    assert choose([n1], 3, []) is None
    # a placement made 2 s ago is not in the heartbeat yet (heartbeat older than placement + grace)
    p = Placement("x.1", "n1", "h200", [6, 7], placed_at=NOW - 2)
    assert choose([n1], 1, [p]) is None
    # once the heartbeat is `grace` newer than the placement, the heartbeat alone decides
    n1_later = node("n1", used=(0, 1, 2, 3, 4, 5), heartbeat=NOW - 2 + GRACE + 0.1)
    assert choose([n1_later], 2, [p], now=NOW + 5) == placement.Choice("n1", (6, 7))
    # ... unless its StartAttempt is still in flight
    assert choose([n1_later], 1, [p], now=NOW + 5, in_flight={"x.1"}) is None


def test_only_ready_fresh_nodes_with_enough_gpus() -> None:
    nodes = [
        node("draining", state=node_pb2.NODE_STATE_DRAINING),
        node("lost", state=node_pb2.NODE_STATE_LOST),
        node("silent", heartbeat=NOW - 30),
        node("small", gpus=2),
        node("other", series="h100"),
    ]
    assert choose(nodes, 4, []) is None
    assert placement.ever_fits(nodes, "h200", 8)
    assert not placement.ever_fits(nodes, "h200", 9)
    assert choose([*nodes, node("ok")], 4, []) == placement.Choice("ok", (0, 1, 2, 3))
    assert choose([node("a"), node("b")], 4, [], exclude={"a"}) == placement.Choice("b", (0, 1, 2, 3))


def test_cpu_attempts_go_to_the_least_busy_node() -> None:
    nodes = [node("n1", 0, running=("a.1", "b.1")), node("n2", 0, running=("c.1",))]
    assert choose(nodes, 0, []) == placement.Choice("n2", ())
    p = Placement("d.1", "n2", "cpu", [], placed_at=NOW)
    p2 = Placement("e.1", "n2", "cpu", [], placed_at=NOW)
    assert choose(nodes, 0, [p, p2]) == placement.Choice("n1", ())


def test_placement_book_persists_and_flags_lost_nodes(tmp_path: pathlib.Path) -> None:
    book = PlacementBook(tmp_path)
    book.put(Placement("j1.1", "n1", "h200", [0, 1], placed_at=5.0))
    book.put(Placement("j2.1", "n2", "h200", [0], placed_at=6.0))
    book.mark_lost({"n2"})
    again = PlacementBook(tmp_path)
    again.load()
    assert again.get("j1.1") == Placement("j1.1", "n1", "h200", [0, 1], placed_at=5.0)
    assert again.get("j2.1").lost  # type: ignore[union-attr]
    again.drop("j1.1")
    third = PlacementBook(tmp_path)
    third.load()
    assert [p.attempt_id for p in third.all()] == ["j2.1"]
    (tmp_path / "placements.json").write_text("{not json")
    broken = PlacementBook(tmp_path)
    broken.load()
    assert broken.all() == []
