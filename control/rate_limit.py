"""Per-user submission rate limit: a token bucket per user, so one user's burst of SubmitJob calls
(each one admission work: blob reads, HuggingFace checks, ledger rows) cannot crowd out everyone else.

The buckets live in this replica's memory: with N replicas behind one address a user can submit up
to N times the rate. That bound is enough for what the limit is for (a runaway loop or a hostile
script, not billing), and costs no database write per submission. Admins are exempt: they are
trusted, and the benchmarks and operators' scripts submit as an admin.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from starforge_api.control.v1 import error_reason_pb2 as er

from common import errors
from control.auth import Principal

# Forget a user's bucket after it has been full for this long (the map stays as small as the
# number of users who submitted recently).
IDLE_FORGET_SECONDS = 600.0


@dataclass
class _Bucket:
    tokens: float
    updated: float


class SubmitRateLimiter:
    """`rate` submissions per second per user on average, `burst` at once; rate 0 means no limit."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = max(1, burst)
        self.clock = clock
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()
        self._last_sweep = clock()

    def check(self, principal: Principal) -> None:
        """Take one submission from the user's bucket; ResourceExhausted when it is empty."""
        if self.rate <= 0 or principal.admin:
            return
        wait = self._take(principal.user)
        if wait > 0:
            raise self._refusal(principal.user, wait)

    def _take(self, user: str) -> float:
        """0 when a token was taken, else the seconds until one is there."""
        now = self.clock()
        with self._lock:
            self._sweep(now)
            b = self._buckets.get(user)
            if b is None:
                b = self._buckets[user] = _Bucket(float(self.burst), now)
            b.tokens = min(float(self.burst), b.tokens + (now - b.updated) * self.rate)
            b.updated = now
            if b.tokens >= 1.0:
                b.tokens -= 1.0
                return 0.0
            return (1.0 - b.tokens) / self.rate

    def _sweep(self, now: float) -> None:
        if now - self._last_sweep < IDLE_FORGET_SECONDS:
            return
        self._last_sweep = now
        full_after = self.burst / self.rate
        for user in [u for u, b in self._buckets.items() if now - b.updated > full_after + IDLE_FORGET_SECONDS]:
            del self._buckets[user]

    def _refusal(self, user: str, wait: float) -> errors.ResourceExhausted:
        retry = math.ceil(wait * 10) / 10
        rate = f"{self.rate:g}"
        message = (
            f"too many submissions: @{user} may make at most {rate} submissions per second "
            f"(bursts of {self.burst}); retry in {retry:g} s"
        )
        return errors.ResourceExhausted(
            message,
            reason=er.ERROR_REASON_SUBMIT_RATE_LIMITED,
            quota_violations=(
                errors.QuotaViolation(f"user:{user}", f"at most {rate} submissions per second, bursts of {self.burst}"),
            ),
            retry_after_seconds=retry,
        )
