"""gRPC server scaffolding shared by every StarForge service.

`create_server(addr, services)` returns `(server, port)`: a grpc.aio server with the error
interceptor, the health service (every registered service reported SERVING) and reflection (v1 and v1alpha),
bound to `addr` ("127.0.0.1:0" binds a free port, which tests use). `serve_until_signal` runs one
until SIGTERM/SIGINT and stops it gracefully.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import _async as health_aio
from grpc_health.v1 import health_pb2, health_pb2_grpc

from common.channel import MAX_MESSAGE_BYTES
from common.gc_tuning import tune_for_serving
from common.reflection import enable_reflection
from common.rpc_status import ErrorInterceptor

log = logging.getLogger("starforge.server")

# What a server receives when no interceptor raises it (common.authn sets per-method limits).
DEFAULT_RECEIVE_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Service:
    """A servicer and the generated function that adds it, plus its full name for health/reflection."""

    servicer: Any
    add_to_server: Callable[[Any, grpc.aio.Server], None]
    full_name: str


def service(servicer: Any, add_to_server: Callable[[Any, grpc.aio.Server], None], descriptor: Any) -> Service:
    """Describe a servicer; `descriptor` is the generated module's DESCRIPTOR.services_by_name[...]."""
    return Service(servicer, add_to_server, descriptor.full_name)


async def create_server(
    addr: str,
    services: Sequence[Service],
    *,
    interceptors: Sequence[Any] = (),
    options: Sequence[tuple[str, Any]] = (),
    credentials: grpc.ServerCredentials | None = None,
) -> tuple[grpc.aio.Server, int, health_aio.HealthServicer]:
    """Build (not start) a server on `addr`; returns (server, bound port, health servicer).

    With `credentials` (`common.tls.server_credentials`) the port serves TLS, else plaintext.
    `bind_server` + `add_services`, for a caller that needs the port before its servicers exist.
    """
    server, port = bind_server(addr, interceptors=interceptors, options=options, credentials=credentials)
    health = await add_services(server, services)
    return server, port, health


def bind_server(
    addr: str,
    *,
    interceptors: Sequence[Any] = (),
    options: Sequence[tuple[str, Any]] = (),
    credentials: grpc.ServerCredentials | None = None,
) -> tuple[grpc.aio.Server, int]:
    """A server (no services yet, not started) bound to `addr`, and its port.

    The transport's receive limit is the largest per-method limit of the interceptors (an
    `authn.AuthnInterceptor` has `max_receive_bytes`), else DEFAULT_RECEIVE_BYTES: a message
    larger than every method accepts is refused before it is buffered.
    """
    receive = max([DEFAULT_RECEIVE_BYTES, *(getattr(i, "max_receive_bytes", 0) for i in interceptors)])
    server = grpc.aio.server(
        # ErrorInterceptor first: it wraps everything after it, auth refusals included.
        interceptors=[ErrorInterceptor(), *interceptors],
        options=[
            ("grpc.max_receive_message_length", receive),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.keepalive_time_ms", 30_000),
            ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.so_reuseport", 0),
            *options,
        ],
    )
    port = server.add_secure_port(addr, credentials) if credentials else server.add_insecure_port(addr)
    if port == 0:
        raise OSError(f"cannot listen on {addr}: address in use or not available")
    return server, port


async def add_services(server: grpc.aio.Server, services: Sequence[Service]) -> health_aio.HealthServicer:
    """Register `services` (before `server.start()`), the health service reporting each SERVING, and reflection."""
    health_servicer = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for s in services:
        s.add_to_server(s.servicer, server)
        await health_servicer.set(s.full_name, health_pb2.HealthCheckResponse.SERVING)
    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    names = [s.full_name for s in services] + [health_pb2.DESCRIPTOR.services_by_name["Health"].full_name]
    enable_reflection(names, server)
    return health_servicer


async def serve_until_signal(
    server: grpc.aio.Server,
    health_servicer: health_aio.HealthServicer | None = None,
    *,
    grace: float = 5.0,
    on_stop: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Run `server` until SIGTERM or SIGINT, then report NOT_SERVING and stop with a grace period.

    The process is a server from here on: the garbage collector gets its serving settings
    (`common.gc_tuning`) first."""
    tune_for_serving()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("stopping (grace %.1fs)", grace)
    if health_servicer is not None:
        await health_servicer.enter_graceful_shutdown()
    if on_stop is not None:
        await on_stop()
    await server.stop(grace)
