"""This node as forgelet knows it: identity, inventory, drain state, and what runs on it now.

What runs (attempt ids and the GPUs they hold) is read from the local executor, whose GPU pool is
rebuilt from attempt records and container labels at start: that is what makes a restarted
forgelet report exactly the attempts that kept running through the restart.

Drain state has two sources. The registry's (DrainNode, seen in the answers to RegisterNode and
Heartbeat) and the local one (`forgelet drain` -> ForgeletService.Drain, which also works when the
control plane cannot be reached). Either one makes the node refuse new attempts. When the registry
says READY again after it had said DRAINING/DRAINED, the node was undrained there, and both clear.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from starforge_api.forgelet.v1 import node_pb2
from starforge_api.job.v1 import job_state_pb2 as st

from common import errors
from executor_svc.local.executor import LocalExecutor
from forgelet import VERSION
from forgelet.gpus import Inventory

log = logging.getLogger("starforge.forgelet")

DRAIN_STATES = (node_pb2.NODE_STATE_DRAINING, node_pb2.NODE_STATE_DRAINED)
ACTIVE = (st.JOB_STATE_PENDING, st.JOB_STATE_RUNNING)
USAGE_REFRESH_SECONDS = 1.0


@dataclass(frozen=True)
class Usage:
    """What runs on the node now."""

    running: tuple[str, ...]
    used_gpus: tuple[int, ...]


class Node:
    """One forgelet's node (module docstring)."""

    def __init__(self, name: str, fleet: str, address: str, inventory: Inventory, executor: LocalExecutor) -> None:
        self.name = name
        self.fleet = fleet
        self.address = address
        self.inventory = inventory
        self.executor = executor
        self._local_drain = False
        self._registry_drain = False

    @property
    def draining(self) -> bool:
        return self._local_drain or self._registry_drain

    def drain_locally(self) -> None:
        if not self._local_drain:
            log.info("node %s: draining (takes no new attempts)", self.name)
        self._local_drain = True

    def apply_registry_state(self, state: int) -> None:
        """Follow the registry's view of this node (from RegisterNode and Heartbeat answers)."""
        if state in DRAIN_STATES:
            if not self._registry_drain:
                said = node_pb2.NodeState.Name(state)
                log.info("node %s: the registry says %s; taking no new attempts", self.name, said)
            self._registry_drain = True
        elif state == node_pb2.NODE_STATE_READY and self._registry_drain:
            log.info("node %s: undrained by the registry; taking attempts again", self.name)
            self._registry_drain = False
            self._local_drain = False

    def refuse_if_draining(self) -> None:
        if self.draining:
            raise errors.FailedPrecondition(
                f"node {self.name} is draining and takes no new attempts; place the attempt on another node",
                precondition_violations=(errors.PreconditionViolation("NODE", self.name, "draining"),),
            )

    async def usage(self) -> Usage:
        """Attempts running now and their GPUs.

        Attempts that ended are released first (the executor's describe), but only for a moment:
        that waits for the launch lock, and a heartbeat must never be late because a container
        is being created. What is not released now is released by the next observation.
        """
        try:
            await asyncio.wait_for(self.executor.describe(), timeout=USAGE_REFRESH_SECONDS)
        except TimeoutError:
            log.debug("node %s: running attempts not refreshed (a launch holds the lock)", self.name)
        except errors.StarforgeError as exc:
            log.warning("node %s: cannot refresh running attempts: %s", self.name, exc.message)
        holders = self.executor.pool.holders()
        return Usage(
            running=tuple(sorted(holders)),
            used_gpus=tuple(sorted({g for h in holders.values() for g in h.gpus})),
        )

    async def active_attempts(self) -> list[str]:
        """Attempts pending or running on this node (from every record and container)."""
        return [o.attempt_id for o in await self.executor.list_attempts() if o.state in ACTIVE]

    def proto(self, usage: Usage | None = None) -> node_pb2.Node:
        node = node_pb2.Node(
            name=self.name,
            address=self.address,
            gpus=[
                node_pb2.Gpu(index=g.index, uuid=g.uuid, name=g.name, memory_mib=g.memory_mib, series=g.series)
                for g in self.inventory.gpus
            ],
            inventory_source=self.inventory.source,
            state=node_pb2.NODE_STATE_DRAINING if self.draining else node_pb2.NODE_STATE_READY,
            version=VERSION,
            fleet=self.fleet,
        )
        if usage is not None:
            node.running_attempt_ids.extend(usage.running)
            node.used_gpu_indices.extend(usage.used_gpus)
        return node
