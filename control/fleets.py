"""Fleet states (drain / undrain), the domain side of FleetService's admin calls."""

from __future__ import annotations

import time

from sqlalchemy import select
from sqlalchemy.orm import Session
from starforge_api.control.v1 import fleet_service_pb2 as pb

from common import errors
from control.auth import Principal
from control.config import ControlConfig
from control.db import models as m
from control.ledger import state_machine as sm


def _check(p: Principal, cfg: ControlConfig, fleet: str) -> None:
    if not p.admin:
        raise errors.PermissionDenied("only admins can drain or undrain fleets")
    if cfg.fleet(fleet) is None:
        raise errors.NotFound(f"no fleet named {fleet!r} (fleets: {', '.join(f.name for f in cfg.fleets)})")


def drain(s: Session, p: Principal, cfg: ControlConfig, fleet: str, reason: str) -> list[str]:
    """Mark the fleet drained; returns the jobs running on it (the reconciler pauses them)."""
    _check(p, cfg, fleet)
    row = s.get(m.FleetState, fleet, with_for_update=True)
    if row is None:
        row = m.FleetState(name=fleet, state=pb.FLEET_STATE_DRAINED, reason=reason, updated_at=time.time())
        s.add(row)
    row.state, row.reason, row.updated_at = pb.FLEET_STATE_DRAINED, reason or "maintenance", time.time()
    return list(s.scalars(select(m.Attempt.job_id).where(m.Attempt.fleet == fleet, m.Attempt.state.in_(sm.ACTIVE))))


def undrain(s: Session, p: Principal, cfg: ControlConfig, fleet: str) -> None:
    _check(p, cfg, fleet)
    row = s.get(m.FleetState, fleet, with_for_update=True)
    if row is not None:
        row.state, row.reason, row.updated_at = pb.FLEET_STATE_ACTIVE, "", time.time()


def states(s: Session) -> dict[str, int]:
    return {r.name: r.state for r in s.scalars(select(m.FleetState))}
