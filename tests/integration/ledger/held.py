"""A `GroupCommit` whose first batch is held on the database thread, so that the items submitted
after it gather into one batch (a group hands a batch over at once when none is running)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sqlalchemy.orm import Session

from control.db.group_commit import GroupCommit

I = TypeVar("I")  # noqa: E741
R = TypeVar("R")


def held_first(apply: Callable[[Session, Sequence[I]], list[R]]) -> tuple[threading.Event, Callable[..., list[R]]]:
    """`apply` whose first call waits until the returned event is set."""
    gate = threading.Event()
    first = [True]

    def held(s: Session, items: Sequence[I]) -> list[R]:
        if first[0]:
            first[0] = False
            assert gate.wait(10), "the first batch was never released"
        return apply(s, items)

    return gate, held


async def behind_a_first(group: GroupCommit[I, R], gate: threading.Event, first: I, items: Sequence[I]) -> list[Any]:
    """Submit `first`, then `items` while it is held; each item's answer (or the exception it got)."""
    tasks = [asyncio.ensure_future(group.submit(i)) for i in [first, *items]]
    await asyncio.sleep(0)  # every task has submitted: `first` is on the database thread, the rest wait
    gate.set()
    return list(await asyncio.gather(*tasks, return_exceptions=True))[1:]
