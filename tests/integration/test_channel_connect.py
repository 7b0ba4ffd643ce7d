"""Client channels (`common.channel`) wait for a server that is slow to answer a new connection.

A busy or restarting server, a slow network or a TLS handshake can take longer than 100 ms to
send the HTTP/2 SETTINGS that complete a connection; a channel must wait for it (within the call's
deadline), not fail the call with UNAVAILABLE. The slow server here is a real gRPC server behind
a loopback relay that holds each new connection for half a second before it passes bytes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import grpc
from grpc_health.v1 import _async as health_aio
from grpc_health.v1 import health_pb2, health_pb2_grpc

from common.channel import aio_channel

HOLD_S = 0.5


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


@contextlib.asynccontextmanager
async def _slow_relay(target_port: int) -> AsyncIterator[int]:
    """A loopback port that relays to `target_port`, each connection held HOLD_S first."""

    async def relay(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        await asyncio.sleep(HOLD_S)
        server_r, server_w = await asyncio.open_connection("127.0.0.1", target_port)
        await asyncio.gather(_pipe(client_r, server_w), _pipe(server_r, client_w))

    relay_server = await asyncio.start_server(relay, "127.0.0.1", 0)
    try:
        yield relay_server.sockets[0].getsockname()[1]
    finally:
        relay_server.close()


async def test_a_call_waits_for_a_server_slow_to_complete_the_connection() -> None:
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health_aio.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with _slow_relay(port) as relay_port:
            async with aio_channel(f"127.0.0.1:{relay_port}") as channel:
                started = time.monotonic()
                reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING
                assert time.monotonic() - started >= HOLD_S  # it did wait for the held connection
    finally:
        await server.stop(None)
