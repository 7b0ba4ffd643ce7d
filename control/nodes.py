"""The node registry: forgelets register and heartbeat; silent nodes are lost.

Identities. An admin enrols a node by minting a join token bound to one node name and fleet
(`create_join_token`); the forgelet's first RegisterNode with it consumes it and gets back a node
credential bound to the same name and fleet (`register`), which it stores and uses from then on.
Only that credential can heartbeat or re-register its node, so nobody else can move a node to
another address or fleet, or claim a name. A new join token for a name replaces the node's
credentials (re-enrolment after a lost state dir). Draining is for admins (or the node itself,
`forgelet drain`); listing for admins, the fleet's executor token, or a node about itself.

A node that has not heartbeated for `node_timeout_seconds` becomes LOST, and every active attempt
placed on it fails with FAILURE_CLASS_NODE_LOST, which is retryable: the job goes back to the
queue within its retry budget and lands on a node that is alive.
"""

from __future__ import annotations

import re
import time

from sqlalchemy import select
from sqlalchemy.orm import Session
from starforge_api.control.v1 import error_reason_pb2
from starforge_api.forgelet.v1 import node_pb2
from starforge_api.job.v1 import job_state_pb2 as st

from common import errors
from control import auth
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


NODE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
FLEET_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
JOIN_TTL_SECONDS = 3600
MAX_JOIN_TTL_SECONDS = 7 * 86400


def _require_admin(p: auth.Principal, what: str) -> None:
    if not p.admin:
        raise errors.PermissionDenied(f"only admins can {what}", reason=error_reason_pb2.ERROR_REASON_FORBIDDEN)


def _require_self(p: auth.Principal, name: str, fleet: str | None = None) -> None:
    """A node identity acts on its own node only (name, and fleet when given)."""
    if p.node != name or (fleet is not None and p.fleet != fleet):
        raise errors.PermissionDenied(
            f"this {auth.KIND_NAMES[p.kind]} belongs to node {p.node!r} of fleet {p.fleet!r}; "
            f"it cannot act as node {name!r}" + (f" of fleet {fleet!r}" if fleet is not None else ""),
            reason=error_reason_pb2.ERROR_REASON_NODE_IDENTITY,
        )


def _check_names(node: str, fleet: str) -> None:
    if not NODE_NAME_RE.match(node):
        raise errors.InvalidArgument(
            f"node name {node[:80]!r} is not valid: 1-200 characters A-Z a-z 0-9 . _ -, "
            "starting with a letter or digit",
            field_violations=(errors.FieldViolation("node", "must match [A-Za-z0-9][A-Za-z0-9._-]{0,199}"),),
        )
    if not FLEET_RE.match(fleet):
        raise errors.InvalidArgument(
            f"fleet name {fleet[:80]!r} is not valid",
            field_violations=(errors.FieldViolation("fleet", "must match [A-Za-z0-9][A-Za-z0-9._-]{0,63}"),),
        )


def _bind(s: Session, p: auth.Principal, kind: str, node: str, fleet: str, name: str, ttl: float | None) -> str:
    token, row = auth.issue_token(s, p.user, kind, name=name, ttl_seconds=ttl)
    s.add(m.TokenBinding(token_id=row.id, node=node, fleet=fleet))
    s.flush()
    return token


def create_join_token(s: Session, p: auth.Principal, node: str, fleet: str, ttl_seconds: int) -> tuple[str, float]:
    """A single-use join token for `node` in `fleet` (admins only); (token, expiry time)."""
    _require_admin(p, "mint node join tokens")
    _check_names(node, fleet)
    if ttl_seconds < 0 or ttl_seconds > MAX_JOIN_TTL_SECONDS:
        raise errors.InvalidArgument(f"ttl must be between 0 (one hour) and {MAX_JOIN_TTL_SECONDS} seconds")
    ttl = float(ttl_seconds or JOIN_TTL_SECONDS)
    return _bind(s, p, "join", node, fleet, f"join {node}", ttl), time.time() + ttl


def create_executor_token(s: Session, p: auth.Principal, fleet: str, name: str) -> str:
    """A token an agent executor uses to list `fleet`'s nodes (admins only)."""
    _require_admin(p, "mint executor tokens")
    _check_names("executor", fleet)
    if len(name) > 200:
        raise errors.InvalidArgument("token name is longer than 200 characters")
    return _bind(s, p, "executor", "", fleet, name or f"executor {fleet}", None)


def _consume_join(s: Session, p: auth.Principal) -> str:
    """Spend the caller's join token and replace the node's credentials by a new one (returned)."""
    row = s.get(m.Token, p.token_id, with_for_update=True)
    now = time.time()
    if row is None or row.revoked_at is not None or (row.expires_at is not None and row.expires_at <= now):
        raise errors.Unauthenticated(
            f"the join token {p.token_id} was already used or has expired; "
            "mint a new one with `sf admin node join-token`",
            reason=error_reason_pb2.ERROR_REASON_JOIN_TOKEN_USED,
        )
    row.revoked_at = now
    old = s.scalars(
        select(m.Token)
        .join(m.TokenBinding, m.TokenBinding.token_id == m.Token.id)
        .where(m.TokenBinding.node == p.node, m.Token.kind == "node", m.Token.revoked_at.is_(None))
    )
    for cred in old:
        cred.revoked_at = now
    return _bind(s, p, "node", p.node, p.fleet, f"node {p.node}", None)


def register(s: Session, p: auth.Principal, node: node_pb2.Node) -> tuple[node_pb2.Node, str]:
    """Register the caller's own node; (node, new node credential when a join token was spent, else "")."""
    if not node.name or not node.address:
        raise errors.InvalidArgument("a node needs a name and an address")
    _require_self(p, node.name, node.fleet)
    credential = _consume_join(s, p) if p.kind == "join" else ""
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
    return _proto(row), credential


def heartbeat(s: Session, p: auth.Principal, name: str, running: list[str], used: list[int]) -> int:
    _require_self(p, name)
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


def list_nodes(s: Session, p: auth.Principal, fleet: str) -> list[node_pb2.Node]:
    """Admins: every node (of `fleet`); an executor token: its fleet's; a node: itself."""
    stmt = select(m.Node).order_by(m.Node.name)
    if p.kind == "executor":
        if fleet and fleet != p.fleet:
            raise errors.PermissionDenied(
                f"this executor token lists fleet {p.fleet!r} only", reason=error_reason_pb2.ERROR_REASON_FORBIDDEN
            )
        fleet = p.fleet
    elif p.kind == "node":
        stmt = stmt.where(m.Node.name == p.node)
    else:
        _require_admin(p, "list nodes")
    if fleet:
        stmt = stmt.where(m.Node.fleet == fleet)
    return [_proto(r) for r in s.scalars(stmt)]


def _may_drain(p: auth.Principal, name: str) -> None:
    if p.kind == "node":
        _require_self(p, name)
    else:
        _require_admin(p, "drain or undrain nodes")


def drain(s: Session, p: auth.Principal, name: str) -> node_pb2.Node:
    _may_drain(p, name)
    row = s.get(m.Node, name, with_for_update=True)
    if row is None:
        raise errors.NotFound(f"node {name} not found")
    if row.state != node_pb2.NODE_STATE_DRAINED:
        row.state = node_pb2.NODE_STATE_DRAINING
    return _proto(row)


def undrain(s: Session, p: auth.Principal, name: str) -> node_pb2.Node:
    _may_drain(p, name)
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
