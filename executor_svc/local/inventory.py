"""Which GPUs (and CPU slots) of this node are held by which running attempt.

The pool is in memory, rebuilt from the attempt records when the executor starts, and changed
only under the executor's launch lock (allocation and start are one step, so two concurrent
launches never get the same GPU). Attempts that ended are released lazily: `allocate` asks
`still_running` about holders, oldest first, until there is room, before it refuses for lack of it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from starforge_api.job.v1 import job_spec_pb2 as spec_pb

from common import errors
from executor_svc.local.config import SeriesConfig
from executor_svc.plumbing.pools import PoolRules, Shape, check_pools

LOCAL_POOLS = PoolRules(kind="local", place="on this node")


@dataclass(frozen=True)
class Holding:
    """GPUs an attempt holds."""

    series: str
    gpus: tuple[int, ...]


class GpuPool:
    """Allocation of the node's configured series (see module docstring)."""

    def __init__(self, inventory: Sequence[SeriesConfig]) -> None:
        self._series = {s.series: s for s in inventory}
        self._held: dict[str, Holding] = {}

    def series(self, name: str) -> SeriesConfig:
        return self._series[name]

    def check(self, pools: Sequence[spec_pb.Pool]) -> spec_pb.Pool:
        """The one pool of a request this node can ever run, or InvalidArgument why not."""
        shapes = {name: Shape(1, len(s.indices())) for name, s in self._series.items()}
        return check_pools(pools, LOCAL_POOLS, shapes)[0]

    def hold(self, attempt_id: str, series: str, gpus: Sequence[int]) -> None:
        """Record a holding found at start-up or made by `allocate`."""
        self._held[attempt_id] = Holding(series, tuple(gpus))

    def release(self, attempt_id: str) -> None:
        self._held.pop(attempt_id, None)

    def holders(self) -> dict[str, Holding]:
        return dict(self._held)

    def free(self, series: str) -> list[int]:
        taken = {g for h in self._held.values() if h.series == series for g in h.gpus}
        return [g for g in self._series[series].indices() if g not in taken]

    def _shortage(self, series: str, count: int) -> str:
        """Why `count` GPUs of `series` cannot be taken now; empty when they can."""
        cfg = self._series[series]
        running = sum(1 for h in self._held.values() if h.series == series)
        if cfg.slots and running >= cfg.slots:
            return f"all {cfg.slots} {series} slots are in use"
        free = len(self.free(series))
        if free < count:
            return f"{free} of {len(cfg.indices())} {series} GPUs are free"
        return ""

    async def release_ended(
        self, still_running: Callable[[str], Awaitable[bool]], *, until: tuple[str, int] | None = None
    ) -> None:
        """Release the holdings of attempts that no longer run, oldest first. With `until`
        (series, count): only that series' holders, and only until `count` of it can be taken (a
        full node asked all of its holders at every launch, 16 inspections of records and
        processes where the oldest one had usually ended). Call under the launch lock."""
        for holder, holding in list(self._held.items()):
            if until is not None:
                if not self._shortage(*until):
                    return
                if holding.series != until[0]:
                    continue
            if not await still_running(holder):
                self.release(holder)

    async def ensure_room(self, series: str, count: int, still_running: Callable[[str], Awaitable[bool]]) -> None:
        """ResourceExhausted unless `count` GPUs of `series` can be taken now.

        Holders that ended are released first (asked through `still_running`). Call under the
        executor's launch lock.
        """
        if self._shortage(series, count):
            await self.release_ended(still_running, until=(series, count))
        why = self._shortage(series, count)
        if why:
            raise errors.ResourceExhausted(
                f"no room on this node now for an attempt with {count} {series} GPUs: {why}; "
                "it can run once another attempt ends",
                quota_violations=(errors.QuotaViolation(f"{series} gpus", why),),
                retry_after_seconds=10.0,
            )

    async def allocate(
        self,
        attempt_id: str,
        series: str,
        count: int,
        still_running: Callable[[str], Awaitable[bool]],
        want: Sequence[int] | None = None,
    ) -> list[int]:
        """Take `count` GPUs (lowest free indices) of `series`, or ResourceExhausted.

        `want` names the exact GPUs to take instead, when a scheduler elsewhere chose them (the
        agent executor places attempts on forgelet nodes): InvalidArgument when they are not
        `count` distinct GPUs of the series, ResourceExhausted when one of them is held.
        Call under the executor's launch lock, which stays held until the attempt started.
        """
        await self.ensure_room(series, count, still_running)
        if want is None:
            gpus = self.free(series)[:count]
        else:
            gpus = await self._wanted(series, count, list(want), still_running)
        self.hold(attempt_id, series, gpus)
        return gpus

    async def _wanted(
        self, series: str, count: int, want: list[int], still_running: Callable[[str], Awaitable[bool]]
    ) -> list[int]:
        known = set(self._series[series].indices())
        if len(set(want)) != len(want) or len(want) != count or not set(want) <= known:
            raise errors.InvalidArgument(
                f"GPUs {want} are not {count} distinct {series} GPUs of this node (it has {sorted(known)})",
                field_violations=(errors.FieldViolation("gpu_indices", f"{count} distinct of {sorted(known)}"),),
            )
        busy = sorted(set(want) - set(self.free(series)))
        if busy:
            await self.release_ended(still_running)
            busy = sorted(set(want) - set(self.free(series)))
        if busy:
            raise errors.ResourceExhausted(
                f"{series} GPUs {busy} of this node are in use by another attempt",
                quota_violations=(errors.QuotaViolation(f"{series} gpus", f"GPUs {busy} in use"),),
                retry_after_seconds=5.0,
            )
        return sorted(want)
