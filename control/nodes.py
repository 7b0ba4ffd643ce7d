"""The node registry: forgelets register and heartbeat; silent nodes are lost.

A node that has not heartbeated for `node_timeout_seconds` becomes LOST, and every active attempt
placed on it fails with FAILURE_CLASS_NODE_LOST, which is retryable: the job goes back to the
queue within its retry budget and lands on a node that is alive.
"""

from __future__ import annotations

import time

from sqlalchemy import select
from sqlalchemy.orm import Session
from starforge.forgelet.v1 import node_pb2
from starforge.job.v1 import job_state_pb2 as st

from common import errors
from control.db import models as m
from control.ledger import jobs, outcomes
from control.ledger import state_machine as sm
from control.ledger.convert import ts


def _proto(row: m.Node) -> node_pb2.Node:
    node = node_pb2.Node()
    node.ParseFromString(row.info)
    node.state = row.state  # type: ignore[assignment]
    stamp = ts(row.last_heartbeat)
    if stamp is not None:
        node.last_heartbeat_time.CopyFrom(stamp)
    return node


def register(s: Session, node: node_pb2.Node) -> node_pb2.Node:
    if not node.name or not node.address:
        raise errors.InvalidArgument("a node needs a name and an address")
    now = time.time()
    row = s.get(m.Node, node.name, with_for_update=True)
    keep = (
        row.state
        if row is not None and row.state in (node_pb2.NODE_STATE_DRAINING, node_pb2.NODE_STATE_DRAINED)
        else None
    )
    info = node_pb2.Node()
    info.CopyFrom(node)
    info.ClearField("last_heartbeat_time")
    if row is None:
        row = m.Node(name=node.name, fleet=node.fleet, address=node.address, info=b"", state=0, last_heartbeat=now)
        s.add(row)
    row.fleet = node.fleet
    row.address = node.address
    row.info = info.SerializeToString()
    row.state = keep or node_pb2.NODE_STATE_READY
    row.last_heartbeat = now
    return _proto(row)


def heartbeat(s: Session, name: str, running: list[str], used: list[int]) -> int:
    row = s.get(m.Node, name, with_for_update=True)
    if row is None:
        raise errors.NotFound(f"node {name} is not registered; register it again")
    info = node_pb2.Node()
    info.ParseFromString(row.info)
    del info.running_attempt_ids[:]
    info.running_attempt_ids.extend(running)
    del info.used_gpu_indices[:]
    info.used_gpu_indices.extend(used)
    row.info = info.SerializeToString()
    row.last_heartbeat = time.time()
    if row.state == node_pb2.NODE_STATE_LOST:
        row.state = node_pb2.NODE_STATE_READY
    if row.state == node_pb2.NODE_STATE_DRAINING and not running:
        row.state = node_pb2.NODE_STATE_DRAINED
    return row.state


def list_nodes(s: Session, fleet: str) -> list[node_pb2.Node]:
    stmt = select(m.Node).order_by(m.Node.name)
    if fleet:
        stmt = stmt.where(m.Node.fleet == fleet)
    return [_proto(r) for r in s.scalars(stmt)]


def drain(s: Session, name: str) -> node_pb2.Node:
    row = s.get(m.Node, name, with_for_update=True)
    if row is None:
        raise errors.NotFound(f"node {name} not found")
    if row.state != node_pb2.NODE_STATE_DRAINED:
        row.state = node_pb2.NODE_STATE_DRAINING
    return _proto(row)


def undrain(s: Session, name: str) -> node_pb2.Node:
    row = s.get(m.Node, name, with_for_update=True)
    if row is None:
        raise errors.NotFound(f"node {name} not found")
    row.state = node_pb2.NODE_STATE_READY
    return _proto(row)


def draining_attempts(s: Session) -> dict[str, tuple[int, str]]:
    """Active attempts on draining nodes, as platform stops: attempt id -> (DRAIN, message)."""
    out: dict[str, tuple[int, str]] = {}
    draining = [r.name for r in s.scalars(select(m.Node).where(m.Node.state == node_pb2.NODE_STATE_DRAINING))]
    if draining:
        for a in s.scalars(select(m.Attempt).where(m.Attempt.node.in_(draining), m.Attempt.state.in_(sm.ACTIVE))):
            out[a.id] = (st.WAIT_REASON_DRAIN, f"node {a.node} is draining")
    return out


def mark_lost(s: Session, timeout: float, now: float | None = None) -> list[jobs.Transition]:
    """Mark silent nodes LOST and fail the attempts placed on them (retryable)."""
    now = time.time() if now is None else now
    out: list[jobs.Transition] = []
    for row in s.scalars(
        select(m.Node).where(
            m.Node.last_heartbeat < now - timeout,
            m.Node.state.not_in((node_pb2.NODE_STATE_LOST, node_pb2.NODE_STATE_DRAINED)),
        )
    ):
        row.state = node_pb2.NODE_STATE_LOST
        for attempt in s.scalars(
            select(m.Attempt).where(m.Attempt.node == row.name, m.Attempt.state.in_(sm.ACTIVE)).with_for_update()
        ):
            job = jobs.get_job(s, attempt.job_id, for_update=True)
            out += outcomes.finish_attempt(
                s,
                job,
                attempt,
                exit_code=None,
                known_class=st.FAILURE_CLASS_NODE_LOST,
                message=f"node lost: {row.name} stopped heartbeating {now - row.last_heartbeat:.0f}s ago",
            )
    return out
