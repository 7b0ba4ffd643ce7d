"""Registration and heartbeats: how the control plane knows this node is alive and what it runs.

At start forgelet calls RegisterNode (name, address, GPUs, inventory source, running attempts),
then Heartbeat every `heartbeat_interval_seconds` the registry asked for. A heartbeat answered
NOT_FOUND (the registry forgot the node: a fresh database) registers again at once. While the
control plane cannot be reached the loop retries with exponential backoff capped at
`max_backoff_seconds`, short enough that a control-plane restart never makes a healthy node miss
the registry's node timeout once the control plane is back.

A forgelet restart is just another RegisterNode: the registry keeps a DRAINING/DRAINED state
across it, and the attempts that kept running are reported again from the first heartbeat.

Calls carry the node's identity (`forgelet.identity`): the join token until the first
RegisterNode returns the node credential, which is stored before it is used.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import grpc
from starforge_api.forgelet.v1 import node_registry_service_pb2 as reg_pb
from starforge_api.forgelet.v1 import node_registry_service_pb2_grpc as reg_grpc

from common.channel import aio_channel, bearer
from common.config import ConfigError
from common.rpc_status import from_rpc_error
from forgelet.identity import NodeIdentity
from forgelet.node import Node

log = logging.getLogger("starforge.forgelet.registration")

DEFAULT_INTERVAL_SECONDS = 2.0
FIRST_BACKOFF_SECONDS = 0.25


class Registrar:
    """Keeps the node registered and heartbeating (module docstring)."""

    def __init__(
        self,
        node: Node,
        control_address: str,
        identity: NodeIdentity,
        *,
        call_timeout: float = 5.0,
        max_backoff: float = 5.0,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        self.node = node
        self._channel = aio_channel(control_address, credentials)
        self._stub = reg_grpc.NodeRegistryServiceStub(self._channel)
        self._identity = identity
        self._timeout = call_timeout
        self._max_backoff = max_backoff
        self.interval = DEFAULT_INTERVAL_SECONDS
        self.registered = False
        self.heartbeats = 0

    def _md(self) -> tuple[tuple[str, str], ...]:
        token = self._identity.bearer()
        return bearer(token) if token else ()

    async def register(self) -> None:
        usage = await self.node.usage()
        r = await self._stub.RegisterNode(
            reg_pb.RegisterNodeRequest(node=self.node.proto(usage)), metadata=self._md(), timeout=self._timeout
        )
        if r.node_token:
            await asyncio.to_thread(self._identity.store, r.node_token)
            log.info("joined: node credential stored in %s", self._identity.credential_path)
        self.interval = float(r.heartbeat_interval_seconds) or DEFAULT_INTERVAL_SECONDS
        self.registered = True
        self.node.apply_registry_state(r.node.state)
        log.info(
            "registered node %s (fleet %s, %d GPUs from %s, %d running) at %s; heartbeat every %.0fs",
            self.node.name,
            self.node.fleet,
            len(self.node.inventory.gpus),
            self.node.inventory.source,
            len(usage.running),
            self.node.address,
            self.interval,
        )

    async def heartbeat(self) -> None:
        usage = await self.node.usage()
        r = await self._stub.Heartbeat(
            reg_pb.HeartbeatRequest(
                name=self.node.name, running_attempt_ids=usage.running, used_gpu_indices=usage.used_gpus
            ),
            metadata=self._md(),
            timeout=self._timeout,
        )
        self.heartbeats += 1
        self.node.apply_registry_state(r.state)

    async def run(self, stop: asyncio.Event) -> None:
        """Register, then heartbeat until `stop` is set (module docstring)."""
        backoff = FIRST_BACKOFF_SECONDS
        failing = False
        while not stop.is_set():
            delay = self.interval
            try:
                if self.registered:
                    await self.heartbeat()
                else:
                    await self.register()
                if failing:
                    log.info("control plane reachable again")
                failing, backoff = False, FIRST_BACKOFF_SECONDS
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.NOT_FOUND and self.registered:
                    log.warning("the registry does not know node %s; registering again", self.node.name)
                    self.registered, delay = False, 0.0
                else:
                    if not failing:
                        log.warning(
                            "cannot reach the node registry (%s); retrying with backoff", from_rpc_error(exc).message
                        )
                    failing, delay = True, backoff
                    backoff = min(backoff * 2, self._max_backoff)
            except ConfigError as exc:  # an unreadable token file
                log.error("%s", exc)
                failing, delay = True, self._max_backoff
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=delay)

    async def close(self) -> None:
        await self._channel.close(None)
