"""AgentExecutor: places attempts on forgelet nodes of one fleet and drives them over gRPC.

The node list (GPUs, state, what each node's last heartbeat said it runs) comes from the control
plane's NodeRegistryService; the agent adds its own placements that heartbeats may not show yet
(`placement.py`). Each attempt's node is recorded (`state.py`) before its StartAttempt is sent,
so Observe/Stop/Cleanup reach the right node, also after this process restarts.

Node loss is the control plane's call, not the executor's: an attempt on a node that does not
answer is reported as it was last seen (PENDING when never seen) with the message "node
unreachable", and the registry's heartbeat timeout fails it as node lost. If such a node comes
back, the copy still running there is a stray: Cleanup (which the control plane keeps retrying for
the ended attempt) stops and removes it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from typing import Any

from starforge_api.executor.v1 import executor_service_pb2 as ex_pb
from starforge_api.executor.v1 import launch_request_pb2 as lr_pb
from starforge_api.forgelet.v1 import forgelet_service_pb2 as fl_pb
from starforge_api.forgelet.v1 import node_pb2
from starforge_api.job.v1 import job_spec_pb2 as spec_pb
from starforge_api.job.v1 import job_state_pb2 as st

from common import __version__, errors
from common.tls import channel_credentials
from executor_svc.agent import placement
from executor_svc.agent.clients import ForgeletClients, RegistryClient, observation_from_proto
from executor_svc.agent.config import AgentConfig
from executor_svc.agent.state import Placement, PlacementBook
from executor_svc.base import (
    RUNTIME_DOCKER,
    RUNTIME_PROCESS,
    Capabilities,
    Executor,
    LaunchResult,
    Observation,
    OutDirRef,
    SeriesInventory,
    entry_from_proto,
)
from executor_svc.out_files import Page
from executor_svc.plumbing.locks import AttemptLocks
from executor_svc.plumbing.pools import PoolRules, check_pools

log = logging.getLogger("starforge.executor.agent")

VERSION = __version__
ACTIVE = (st.JOB_STATE_PENDING, st.JOB_STATE_RUNNING)
UNREACHABLE = (errors.Unavailable, errors.DeadlineExceeded)
STRAY_STOP_GRACE_SECONDS = 10
ARTIFACT_LIST_TIMEOUT_SECONDS = 300.0  # a first listing hashes every file of the page
ARTIFACT_READ_TIMEOUT_SECONDS = 6 * 3600.0  # one file of a checkpoint, however large
AGENT_POOLS = PoolRules(kind="agent", place="in this fleet")


def _node_refused(exc: errors.StarforgeError) -> bool:
    """A refusal that is about the node (draining, GPUs taken), so another node may take it."""
    if isinstance(exc, errors.ResourceExhausted):
        return True
    return isinstance(exc, errors.FailedPrecondition) and any(v.type == "NODE" for v in exc.precondition_violations)


class AgentExecutor(Executor):
    """The `agent` kind. Build it with `await AgentExecutor.create(cfg)`."""

    kind = "agent"

    def __init__(self, cfg: AgentConfig) -> None:
        self.cfg = cfg
        self.book = PlacementBook(cfg.state_dir.expanduser().resolve())
        credentials = channel_credentials(cfg.tls)
        self.registry = RegistryClient(
            cfg.control_address, cfg.fleet, cfg.registry_token, cfg.call_timeout_seconds, credentials
        )
        self.forgelets = ForgeletClients(cfg.node_token, cfg.call_timeout_seconds, credentials, cfg.tls)
        self._nodes: dict[str, node_pb2.Node] = {}
        self._nodes_at = 0.0
        self._place_lock = asyncio.Lock()
        self._attempts = AttemptLocks()
        self._in_flight: set[str] = set()
        self._last: dict[str, Observation] = {}
        self._launches: dict[str, asyncio.Future[LaunchResult]] = {}

    @classmethod
    async def create(cls, cfg: AgentConfig) -> AgentExecutor:
        ex = cls(cfg)
        await asyncio.to_thread(ex.book.load)
        log.info(
            "agent executor ready: fleet %s, registry %s, %d placements known",
            cfg.fleet,
            cfg.control_address,
            len(ex.book.all()),
        )
        return ex

    # -- nodes ------------------------------------------------------------------------------

    async def _refresh(self, *, force: bool = False) -> dict[str, node_pb2.Node]:
        """The fleet's nodes, read again when forced or older than `nodes_refresh_seconds`."""
        if force or not self._nodes or time.monotonic() - self._nodes_at > self.cfg.nodes_refresh_seconds:
            nodes = await self.registry.list_nodes()
            self._nodes = {n.name: n for n in nodes}
            self._nodes_at = time.monotonic()
            lost = {n.name for n in nodes if n.state == node_pb2.NODE_STATE_LOST}
            if lost:
                self.book.mark_lost(lost)
        return self._nodes

    async def _address(self, node: str) -> str:
        found = (await self._refresh()).get(node) or (await self._refresh(force=True)).get(node)
        if found is None:
            raise errors.Unavailable(f"node {node} is not in the registry of fleet {self.cfg.fleet}")
        return found.address

    async def _call(self, node: str, method: str, request: Any, timeout: float | None = None) -> Any:
        address = await self._address(node)
        try:
            return await self.forgelets.call(address, method, request, timeout)
        except UNREACHABLE:
            self._nodes_at = 0.0  # the forgelet may have moved: read the addresses again next time
            raise

    # -- describe ---------------------------------------------------------------------------

    async def describe(self) -> Capabilities:
        try:
            nodes = list((await self._refresh(force=True)).values())
        except errors.StarforgeError as exc:
            # The executor itself is up; its inventory is unknown until the registry answers.
            log.warning("describe: %s", exc.message)
            nodes = list(self._nodes.values())
        now = time.time()
        ready = [n for n in nodes if placement.usable(n, now, self.cfg.stale_node_seconds)]
        by_series: dict[str, list[node_pb2.Node]] = defaultdict(list)
        for n in ready:
            for series in sorted({g.series for g in n.gpus}):
                by_series[series].append(n)
        placements = self.book.all()
        grace = self.cfg.reservation_grace_seconds
        inventory = [
            SeriesInventory(
                series,
                len(ns),
                max(len(placement.series_gpus(n, series)) for n in ns),
                sum(placement.free_gpus(n, series, placements, self._in_flight, grace) for n in ns),
            )
            for series, ns in sorted(by_series.items())
        ]
        if self.cfg.runtime == RUNTIME_PROCESS or not by_series:
            inventory.append(SeriesInventory("cpu", len(ready), 0, 0))
        caps = {ex_pb.EXECUTOR_CAPABILITY_PAUSE, ex_pb.EXECUTOR_CAPABILITY_ARTIFACTS}
        if self.cfg.runtime == RUNTIME_DOCKER:
            caps |= {ex_pb.EXECUTOR_CAPABILITY_IMAGES, ex_pb.EXECUTOR_CAPABILITY_GPUS}
        elif by_series:
            caps.add(ex_pb.EXECUTOR_CAPABILITY_GPUS)
        return Capabilities(
            kind=self.kind,
            runtime=self.cfg.runtime,
            capabilities=frozenset(caps),
            inventory=tuple(inventory),
            version=VERSION,
        )

    # -- launch -----------------------------------------------------------------------------

    def _check(self, request: lr_pb.LaunchRequest) -> spec_pb.Pool:
        # Series and GPU counts are checked at placement, against the nodes the registry knows.
        return check_pools(request.pools, AGENT_POOLS)[0]

    async def launch(self, request: lr_pb.LaunchRequest) -> LaunchResult:
        """Place and start the attempt; the start outlives a caller that gives up (its deadline).

        StartAttempt can take long (the node downloads the capsule and workspace first). When the
        control plane's Launch deadline runs out it retries the same attempt; that retry joins
        the start still in progress instead of cancelling it and starting over.
        """
        pool = self._check(request)
        task = self._launches.get(request.attempt_id)
        if task is None:
            task = asyncio.ensure_future(self._launch(request, pool))
            self._launches[request.attempt_id] = task
            task.add_done_callback(lambda t: self._launch_done(request.attempt_id, t))
        return await asyncio.shield(task)

    def _launch_done(self, attempt_id: str, task: asyncio.Future[LaunchResult]) -> None:
        self._launches.pop(attempt_id, None)
        if not task.cancelled() and task.exception() is not None:
            log.debug("launch of %s failed: %s", attempt_id, task.exception())

    async def _launch(self, request: lr_pb.LaunchRequest, pool: spec_pb.Pool) -> LaunchResult:
        async with self._attempts.lock(request.attempt_id):
            tried: set[str] = set()
            existing = self.book.get(request.attempt_id)
            if existing is not None:
                try:
                    return await self._start(existing, request)
                except errors.StarforgeError as exc:
                    # Refused: it never started there (forgelet answers a started attempt as such).
                    if not _node_refused(exc):
                        raise
                    self.book.drop(request.attempt_id)
                    tried.add(existing.node)
            while True:
                chosen = await self._place(request.attempt_id, pool, tried)
                try:
                    return await self._start(chosen, request)
                except errors.StarforgeError as exc:
                    if isinstance(exc, UNREACHABLE):
                        raise  # it may have started there: keep the placement, the retry goes there
                    self.book.drop(request.attempt_id)
                    if not _node_refused(exc):
                        raise
                    log.info("node %s refused %s (%s); trying another node", chosen.node, request.attempt_id, exc)
                    tried.add(chosen.node)

    async def _place(self, attempt_id: str, pool: spec_pb.Pool, tried: set[str]) -> Placement:
        """Choose a node and GPUs and record the placement, under the placement lock."""
        async with self._place_lock:
            nodes = list((await self._refresh(force=True)).values())
            choice = placement.choose(
                nodes,
                pool.series,
                pool.gpus_per_node,
                self.book.all(),
                self._in_flight,
                now=time.time(),
                stale_after=self.cfg.stale_node_seconds,
                grace=self.cfg.reservation_grace_seconds,
                exclude=tried,
            )
            if choice is None:
                raise self._no_room(nodes, pool, tried)
            chosen = Placement(attempt_id, choice.node, pool.series, list(choice.gpus))
            self._in_flight.add(attempt_id)
            self.book.put(chosen)
            return chosen

    def _no_room(self, nodes: list[node_pb2.Node], pool: spec_pb.Pool, tried: set[str]) -> errors.StarforgeError:
        what = f"{pool.gpus_per_node} {pool.series} GPUs" if pool.gpus_per_node else f"a {pool.series} slot"
        if not nodes:
            why = f"no forgelet node has registered in fleet {self.cfg.fleet} yet"
        elif not placement.ever_fits(nodes, pool.series, pool.gpus_per_node):
            have = sorted({f"{len(placement.series_gpus(n, pool.series))} on {n.name}" for n in nodes})
            return errors.InvalidArgument(
                f"no node of fleet {self.cfg.fleet} has {what} (its {pool.series} GPUs: {', '.join(have)})",
                field_violations=(errors.FieldViolation("pools[0]", f"no node has {what}"),),
            )
        else:
            why = f"no ready node of fleet {self.cfg.fleet} has {what} free now"
            if tried:
                why += f" (refused by {', '.join(sorted(tried))})"
        return errors.ResourceExhausted(
            f"{why}; it can run once an attempt ends or a node joins",
            quota_violations=(errors.QuotaViolation(f"{pool.series} gpus", why),),
            retry_after_seconds=5.0,
        )

    async def _start(self, chosen: Placement, request: lr_pb.LaunchRequest) -> LaunchResult:
        self._in_flight.add(chosen.attempt_id)
        try:
            r = await self._call(
                chosen.node,
                "StartAttempt",
                fl_pb.StartAttemptRequest(launch=request, gpu_indices=chosen.gpus),
                timeout=self.cfg.launch_timeout_seconds,
            )
        finally:
            self._in_flight.discard(chosen.attempt_id)
        chosen.placed_at = time.time()
        self.book.put(chosen)
        if not r.already_started:
            log.info("launched %s on node %s (%s GPUs %s)", chosen.attempt_id, chosen.node, chosen.series, chosen.gpus)
        return LaunchResult(backend_handle=r.container_id, already_launched=r.already_started, node=chosen.node)

    # -- observe ----------------------------------------------------------------------------

    async def observe(self, attempt_ids: Sequence[str]) -> list[Observation]:
        by_node: dict[str, list[str]] = defaultdict(list)
        unknown: list[str] = []
        for a in attempt_ids:
            p = self.book.get(a)
            if p is None:
                unknown.append(a)
            else:
                by_node[p.node].append(a)
        found: dict[str, Observation] = {}
        for part in await asyncio.gather(*(self._inspect(n, ids) for n, ids in by_node.items())):
            found.update(part)
        if unknown:
            found.update(await self._search(unknown))
        out = [found.get(a) or Observation.missing(a) for a in attempt_ids]
        for o in out:
            if not o.not_found and not o.message.startswith("node unreachable"):
                self._last[o.attempt_id] = o
        return out

    async def _inspect(self, node: str, ids: list[str]) -> dict[str, Observation]:
        try:
            r = await self._call(node, "InspectAttempts", fl_pb.InspectAttemptsRequest(attempt_ids=ids))
        except UNREACHABLE as exc:
            return {a: self._unreachable(a, node, exc.message) for a in ids}
        return {o.attempt_id: o for o in map(observation_from_proto, r.observations)}

    def _unreachable(self, attempt_id: str, node: str, why: str) -> Observation:
        """What to report for an attempt whose node does not answer (module docstring)."""
        message = f"node unreachable: {node}: {why}"
        last = self._last.get(attempt_id)
        if last is not None:
            return dataclasses.replace(last, message=f"{message} (last seen: {last.message})")
        # Never seen: its start may or may not have happened there. PENDING claims no more than
        # that (RUNNING made the control plane take an unconfirmed start for a running attempt,
        # and call it lost when the node came back without it instead of sending it again).
        return Observation(attempt_id, state=st.JOB_STATE_PENDING, message=message, node=node)

    async def _search(self, ids: list[str]) -> dict[str, Observation]:
        """Find attempts with no placement on record by asking every node (a lost state file)."""
        try:
            nodes = list((await self._refresh()).values())
        except errors.StarforgeError as exc:
            log.warning("cannot search nodes for %s: %s", ids, exc.message)
            return {}

        async def ask(node: node_pb2.Node) -> list[Observation]:
            try:
                r = await self.forgelets.call(
                    node.address, "InspectAttempts", fl_pb.InspectAttemptsRequest(attempt_ids=ids)
                )
            except errors.StarforgeError:
                return []
            return [observation_from_proto(o) for o in r.observations if not o.not_found]

        found: dict[str, Observation] = {}
        for node, observations in zip(nodes, await asyncio.gather(*(ask(n) for n in nodes)), strict=True):
            for o in observations:
                found[o.attempt_id] = o
                if self.book.get(o.attempt_id) is None:
                    self.book.put(Placement(o.attempt_id, node.name, placed_at=0.0))
        return found

    async def _node_of(self, attempt_id: str) -> str | None:
        p = self.book.get(attempt_id)
        if p is None and await self._search([attempt_id]):
            p = self.book.get(attempt_id)
        return None if p is None else p.node

    # -- stop / cleanup / list --------------------------------------------------------------

    async def stop(self, attempt_id: str, grace_seconds: float) -> bool:
        node = await self._node_of(attempt_id)
        if node is None:
            return False
        r = await self._call(
            node,
            "StopAttempt",
            fl_pb.StopAttemptRequest(attempt_id=attempt_id, grace_seconds=math.ceil(grace_seconds)),
            timeout=grace_seconds + self.cfg.call_timeout_seconds,
        )
        return bool(r.stopped)

    async def cleanup(self, attempt_id: str) -> int:
        async with self._attempts.lock(attempt_id):
            node = await self._node_of(attempt_id)
            p = self.book.get(attempt_id)
            if node is None or p is None:
                return 0
            try:
                removed = await self._remove(node, attempt_id)
            except errors.FailedPrecondition:
                if not self._stray(p):
                    if p.cleanup_since is None:
                        p.cleanup_since = time.time()
                        self.book.put(p)
                    raise
                removed = await self._stop_stray(p)
            except UNREACHABLE:
                try:
                    await self._refresh(force=True)  # flags placements on nodes now LOST
                except errors.StarforgeError as exc:
                    log.debug("cannot read the registry: %s", exc.message)
                raise
            self.book.drop(attempt_id)
            self._last.pop(attempt_id, None)
            return removed

    async def _remove(self, node: str, attempt_id: str) -> int:
        r = await self._call(node, "RemoveAttempt", fl_pb.RemoveAttemptRequest(attempt_id=attempt_id))
        return 1 if r.removed else 0

    def _stray(self, p: Placement) -> bool:
        waited = p.cleanup_since is not None and time.time() - p.cleanup_since >= self.cfg.stray_grace_seconds
        return p.lost or waited

    async def _stop_stray(self, p: Placement) -> int:
        why = "its node was lost meanwhile" if p.lost else f"for {self.cfg.stray_grace_seconds:.0f}s"
        log.warning(
            "attempt %s still runs on node %s although the control plane ended it (%s): stopping it",
            p.attempt_id,
            p.node,
            why,
        )
        await self._call(
            p.node,
            "StopAttempt",
            fl_pb.StopAttemptRequest(attempt_id=p.attempt_id, grace_seconds=STRAY_STOP_GRACE_SECONDS),
            timeout=STRAY_STOP_GRACE_SECONDS + self.cfg.call_timeout_seconds,
        )
        return await self._remove(p.node, p.attempt_id)

    async def list_attempts(self) -> list[Observation]:
        nodes = list((await self._refresh(force=True)).values())

        async def everything(node: node_pb2.Node) -> list[Observation] | None:
            try:
                r = await self.forgelets.call(node.address, "InspectAttempts", fl_pb.InspectAttemptsRequest())
            except errors.StarforgeError as exc:
                log.info("list_attempts: node %s: %s", node.name, exc.message)
                return None
            return [observation_from_proto(o) for o in r.observations]

        found: dict[str, Observation] = {}
        reachable: set[str] = set()
        for node, observations in zip(nodes, await asyncio.gather(*(everything(n) for n in nodes)), strict=True):
            if observations is None:
                continue
            reachable.add(node.name)
            for o in observations:
                found[o.attempt_id] = o
                if o.state in ACTIVE and self.book.get(o.attempt_id) is None:
                    self.book.put(Placement(o.attempt_id, node.name, placed_at=0.0))  # rebuilds a lost map
        for p in self.book.all():
            if p.attempt_id not in found and p.node not in reachable:
                found[p.attempt_id] = self._unreachable(p.attempt_id, p.node, "did not answer ListAttempts")
        return [found[a] for a in sorted(found)]

    # -- artifacts (EXECUTOR_CAPABILITY_ARTIFACTS): served by the node that ran the attempt ------

    async def _artifact_node(self, ref: OutDirRef) -> str:
        node = ref.node or await self._node_of(ref.attempt_id)
        if not node:
            raise errors.NotFound(f"no node of fleet {self.cfg.fleet} is known to have run {ref.attempt_id}")
        return node

    async def list_artifacts(self, ref: OutDirRef, page_size: int, page_token: str) -> Page:
        node = await self._artifact_node(ref)
        request = fl_pb.ListArtifactsRequest(out_key=ref.out_key, page_size=page_size, page_token=page_token)
        r = await self._call(node, "ListArtifacts", request, timeout=ARTIFACT_LIST_TIMEOUT_SECONDS)
        return Page([entry_from_proto(a) for a in r.artifacts], r.next_page_token)

    async def read_artifact(self, ref: OutDirRef, path: str, offset: int) -> AsyncIterator[tuple[int, bytes, int]]:
        node = await self._artifact_node(ref)
        address = await self._address(node)
        request = fl_pb.ReadArtifactRequest(out_key=ref.out_key, path=path, offset=offset)
        async for r in self.forgelets.stream(address, "ReadArtifact", request, ARTIFACT_READ_TIMEOUT_SECONDS):
            yield r.offset, r.data, r.size

    async def close(self) -> None:
        await self.registry.close()
        await self.forgelets.close()
