"""Per-user limit on log and watch streams held open at once, so that one user's thousands of
`StreamJobLogs` follows (a runaway script, a hostile client) cannot take the event loop from
everyone else.

Every open stream costs the console's single event loop work per message; on two cores about
8,000 follow streams kept it so busy that it accepted new calls at 2-3 a second (docs/benchmarks.md,
the followers row), and every other user's submissions, and every job's telemetry, waited with them.
`streams_per_user` bounds what one user's personal tokens may hold open on one replica:
`StreamJobLogs` and `WatchJob`, counted together from the call's start to its end, whatever ends
it. The call that would pass the limit is refused at once, before its handler runs:
RESOURCE_EXHAUSTED, reason STREAM_LIMITED, a QuotaFailure naming the user and the limit.

Not counted: admins (trusted; the benchmarks follow as one) and run, node and executor tokens (a
job's own telemetry and downloads never wait on its owner's followers). The counts live in this
replica's memory, as the submission rate limit's buckets do: behind N replicas a user may hold up
to N times the limit. They are only touched on the event loop, so they need no lock.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from starforge_api.control.v1 import error_reason_pb2 as er

from common import errors
from control import auth

# The long-lived streams a user opens: what the limit counts.
LIMITED_METHODS = frozenset(
    {
        "/starforge.control.v1.ControlService/StreamJobLogs",
        "/starforge.control.v1.ControlService/WatchJob",
    }
)


class StreamLimiter:
    """Counts the limited streams each user holds open; `limit` 0 means no limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: dict[str, int] = {}

    def open_streams(self, user: str) -> int:
        return self._open.get(user, 0)

    def acquire(self, principal: auth.Principal) -> Callable[[], None] | None:
        """Count one more stream for the caller, or refuse it (ResourceExhausted). Returns the
        release to call when the stream ends; None when the caller is not counted."""
        if self.limit <= 0 or principal.admin or principal.kind != "pat":
            return None
        user = principal.user
        held = self._open.get(user, 0)
        if held >= self.limit:
            raise errors.ResourceExhausted(
                f"too many open streams: @{user} already holds {held} log and watch streams on this console, "
                f"the most a user may hold at once; close one (an `sf job logs -f` left running, a browser "
                "tab) and retry",
                reason=er.ERROR_REASON_STREAM_LIMITED,
                quota_violations=(
                    errors.QuotaViolation(f"user:{user}", f"at most {self.limit} log and watch streams open at once"),
                ),
            )
        self._open[user] = held + 1
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            left = self._open.get(user, 1) - 1
            if left > 0:
                self._open[user] = left
            else:
                self._open.pop(user, None)

        return release


class StreamLimitInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Applies a `StreamLimiter` to `LIMITED_METHODS`. It must come after the authentication
    interceptor (it reads the caller it bound). Its wrapper is a plain function that returns the
    handler's own generator, and the release runs from the call's done-callback: no layer is
    added to the path of every message."""

    def __init__(self, limiter: StreamLimiter) -> None:
        self.limiter = limiter

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
        details: grpc.HandlerCallDetails,
    ) -> Any:
        handler = await continuation(details)
        if handler is None or details.method not in LIMITED_METHODS or not handler.unary_stream:
            return handler
        behavior = handler.unary_stream
        limiter = self.limiter

        def limited(request: Any, context: Any) -> Any:
            release = limiter.acquire(auth.current())
            if release is not None:
                context.add_done_callback(lambda _context: release())
            return behavior(request, context)

        return grpc.unary_stream_rpc_method_handler(
            limited,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
