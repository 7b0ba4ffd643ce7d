"""The floor of the admission row on this machine: a grpc.aio server whose one unary method does
nothing (raw bytes in, empty bytes out, no protobuf, no interceptors), in its own process, called
by the same 32-client storm as `bench.admission`. Its calls/s and CPU per call are what the Python
gRPC server alone costs; a submission cannot be cheaper.

`python -m bench.grpc_floor` runs the server and the storm and prints the figures as JSON;
`python -m bench.grpc_floor --serve READY_FILE` is the server (writes its port to READY_FILE).
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import sys
from typing import Any

import grpc

from bench.common import LOADGEN_CPUS, floor_server, log, pinned
from common.channel import aio_channel

METHOD = "/bench.Floor/Noop"


async def _serve(ready: pathlib.Path) -> None:
    async def noop(request: bytes, context: Any) -> bytes:
        return b""

    handler = grpc.method_handlers_generic_handler(
        "bench.Floor",
        {"Noop": grpc.unary_unary_rpc_method_handler(noop)},
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    await asyncio.to_thread(ready.write_text, str(port))
    await server.wait_for_termination()


def measure() -> dict[str, float]:
    """The no-op server's calls/s and CPU per call under the admission storm."""
    from bench.admission import CLIENTS, _storm

    with floor_server("bench.grpc_floor", what="the no-op gRPC server") as (pid, address):

        async def go() -> dict[str, float]:
            channels = [aio_channel(address) for _ in range(CLIENTS)]
            calls = [ch.unary_unary(METHOD, None, None) for ch in channels]
            try:
                return await _storm(lambda i: calls[i](b"x" * 200), pid)
            finally:
                for ch in channels:
                    await ch.close(None)

        with pinned(LOADGEN_CPUS):
            return asyncio.run(go())


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        asyncio.run(_serve(pathlib.Path(sys.argv[2])))
        return
    out = measure()
    log(f"no-op gRPC: {out['per_s']:.0f}/s, {out.get('server_cpu_ms_per_call', 0):.3f} ms server CPU per call")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
