"""FleetService servicer: the hardware registry, fleets with capacity, drains."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session
from starforge_api.control.v1 import fleet_service_pb2 as pb
from starforge_api.control.v1 import fleet_service_pb2_grpc as pb_grpc
from starforge_api.executor.v1 import executor_service_pb2 as ex

from control import auth, fleets, windows
from control.context import Context
from control.db import models as m
from control.ledger import state_machine as sm

CAPABILITY_NAMES: dict[int, str] = {
    ex.EXECUTOR_CAPABILITY_MULTI_POOL: "multi_pool",
    ex.EXECUTOR_CAPABILITY_PAUSE: "pause",
    ex.EXECUTOR_CAPABILITY_GPUS: "gpus",
    ex.EXECUTOR_CAPABILITY_MULTI_NODE: "multi_node",
    ex.EXECUTOR_CAPABILITY_IMAGES: "images",
}


def _usage(s: Session) -> tuple[dict[tuple[str, str], int], dict[str, int], dict[str, int]]:
    used: dict[tuple[str, str], int] = defaultdict(int)
    running: dict[str, int] = defaultdict(int)
    for fleet, needs in s.execute(select(m.Attempt.fleet, m.Attempt.needs).where(m.Attempt.state.in_(sm.ACTIVE))):
        running[fleet] += 1
        for series, n in json.loads(needs or "{}").items():
            used[(fleet, series)] += int(n)
    depth = dict(
        s.execute(select(m.Job.queue, func.count()).where(m.Job.state == sm.QUEUED).group_by(m.Job.queue)).all()
    )
    return used, running, {str(k): int(v) for k, v in depth.items()}


class FleetServicer(pb_grpc.FleetServiceServicer):
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def ListProfiles(self, request: pb.ListProfilesRequest, context: Any) -> pb.ListProfilesResponse:
        return pb.ListProfilesResponse(
            profiles=[
                pb.HardwareProfile(
                    series=p.series,
                    gpus_per_node=p.gpus_per_node,
                    gpu_memory_gib=p.gpu_memory_gib,
                    interconnect=p.interconnect,
                    default_gpus=p.default_gpus,
                    max_nodes=p.max_nodes,
                    description=p.description,
                )
                for p in self.ctx.cfg.profiles
            ]
        )

    async def ListFleets(self, request: pb.ListFleetsRequest, context: Any) -> pb.ListFleetsResponse:
        caller = auth.current() if context is not None else None
        # Executor addresses are for admins: to anyone else they are a map of what to attack.
        show_address = caller is None or caller.admin
        used, running, depth = await self.ctx.db.run(_usage)
        fleet_states = await self.ctx.db.run(fleets.states)
        out = []
        for f in self.ctx.cfg.fleets:
            st = self.ctx.executors.status[f.name]
            out.append(
                pb.Fleet(
                    name=f.name,
                    kind=f.kind,
                    executor_address=f.address if show_address else "",
                    state=fleet_states.get(f.name, pb.FLEET_STATE_ACTIVE)  # type: ignore[arg-type]
                    if fleet_states.get(f.name) == pb.FLEET_STATE_DRAINED
                    else (pb.FLEET_STATE_ACTIVE if windows.is_open(f.window) else pb.FLEET_STATE_CLOSED),
                    capacity=[
                        pb.SeriesCapacity(
                            series=i.series,
                            total_gpus=i.nodes * i.gpus_per_node,
                            used_gpus=used.get((f.name, i.series), 0),
                            nodes=i.nodes,
                        )
                        for i in f.inventory
                    ],
                    capabilities=sorted(CAPABILITY_NAMES.get(c, str(c)) for c in st.capabilities),
                    window=f.window,
                    running_jobs=running.get(f.name, 0),
                )
            )
        return pb.ListFleetsResponse(fleets=out, queue_depth=depth)

    async def _fleet(self, name: str) -> pb.Fleet:
        r = await self.ListFleets(pb.ListFleetsRequest(), None)
        return next(f for f in r.fleets if f.name == name)

    async def DrainFleet(self, request: pb.DrainFleetRequest, context: Any) -> pb.DrainFleetResponse:
        p = auth.current()
        job_ids = await self.ctx.db.run(lambda s: fleets.drain(s, p, self.ctx.cfg, request.fleet, request.reason))
        self.ctx.notifier.notify("reconcile", "schedule")
        return pb.DrainFleetResponse(fleet=await self._fleet(request.fleet), paused_job_ids=job_ids)

    async def UndrainFleet(self, request: pb.UndrainFleetRequest, context: Any) -> pb.UndrainFleetResponse:
        p = auth.current()
        await self.ctx.db.run(lambda s: fleets.undrain(s, p, self.ctx.cfg, request.fleet))
        self.ctx.notifier.notify("reconcile", "schedule")
        return pb.UndrainFleetResponse(fleet=await self._fleet(request.fleet))
