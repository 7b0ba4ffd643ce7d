"""Backoff for the calls the control plane repeats against executors and nodes.

Three calls are repeated until the backend agrees with the ledger: Stop (until the attempt is seen
ended), Observe (every reconcile cycle, for every active attempt) and a Launch re-send (after a
transient failure). The reconcile loop wakes on every notification, so without a schedule a call
that keeps getting the same answer is repeated as fast as the loop turns (a pause whose node
answered stopped=false sent ~60 StopAttempt calls in a quarter of a second). Every repeat waits
by its policy, per attempt:

    delay after the n-th try = min(cap, base * 2**(n-1)) * uniform(0.5, 1.0)

(exponential, capped, "equal jitter": replicas and attempts that failed together spread out, and
no delay is shorter than half its step, which bounds the number of calls in any time span; see
`Policy.max_calls`).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Policy:
    base: float
    cap: float

    def ceiling(self, tries: int) -> float:
        """The longest delay after `tries` tries (>= 1)."""
        return min(self.cap, self.base * 2.0 ** max(0, tries - 1))

    def delay(self, tries: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after the `tries`-th try before the next one."""
        return self.ceiling(tries) * (rng or _RNG).uniform(0.5, 1.0)

    def tries_after(self, elapsed: float) -> int:
        """How many tries the schedule makes in `elapsed` seconds at its longest delays: for a
        retry whose count is not stored (a backend that stays full), the count its wait implies."""
        return max(1, 1 + int(math.log2(1.0 + max(0.0, elapsed) / self.base)))

    def max_calls(self, seconds: float) -> int:
        """The most calls the schedule allows within `seconds` (every delay at its shortest), the
        first, immediate call included."""
        calls, spent = 1, 0.0
        while True:
            spent += 0.5 * self.ceiling(calls)
            if spent > seconds:
                return calls
            calls += 1


# Stop: the backend needs time to stop what runs (its own grace period); asking again at once
# cannot help.
STOP = Policy(base=1.0, cap=30.0)
# Observe of an attempt whose state did not change: often at first (a launch turning RUNNING),
# then at most every 5 s (a long run; its capsule reports its end itself).
OBSERVE = Policy(base=0.5, cap=5.0)
# Launch re-send after a transient error (unreachable, deadline) or a full backend.
LAUNCH = Policy(base=2.0, cap=30.0)
LAUNCH_FULL = Policy(base=1.0, cap=10.0)

_RNG = random.Random()


@dataclass
class _Entry:
    tries: int = 0
    next_at: float = 0.0


@dataclass
class Tracker:
    """The tries of one policy per attempt, in memory (a restarted replica starts each attempt's
    schedule over, which costs at most one early call per attempt)."""

    policy: Policy
    rng: random.Random = field(default_factory=random.Random)
    _entries: dict[str, _Entry] = field(default_factory=dict)

    def due(self, key: str, now: float) -> bool:
        """Whether a call for `key` may be made now."""
        entry = self._entries.get(key)
        return entry is None or now >= entry.next_at

    def tried(self, key: str, now: float) -> None:
        """A call for `key` was made and did not settle it: schedule the next one."""
        entry = self._entries.setdefault(key, _Entry())
        entry.tries += 1
        entry.next_at = now + self.policy.delay(entry.tries, self.rng)

    def reset(self, key: str) -> None:
        """Something changed for `key`: its next call may be made at once."""
        self._entries.pop(key, None)

    def keep_only(self, keys: set[str]) -> None:
        """Forget the attempts that are no longer active."""
        for key in [k for k in self._entries if k not in keys]:
            del self._entries[key]

    def tries(self, key: str) -> int:
        entry = self._entries.get(key)
        return entry.tries if entry is not None else 0
