"""The floor of the followers row on this machine: a bare grpc.aio server in its own process that
answers `StreamJobLogs` (the same method path, so `bench.followers`' follower processes run
unchanged against it) and does nothing else: no ledger, no ingest, no authorization, no
interceptors. Each of its RUNS runs prints a line `tick <i> <time>` every INTERVAL_S (the runs'
ticks spread over the interval, as the row's reporter spreads them); the line's response is
serialized once and handed to every stream following that run (a follower that fell behind gets the
newest line only). A new stream gets the run's latest line at once, like `tail_lines=1`.

It runs with the garbage collector's serving settings, as every StarForge server does
(`common.gc_tuning`), so that the floor stays a floor.

What it costs is what Python gRPC alone costs to hold the row's streams and send each one a
message a second, with the same follower processes on the same cores: a console cannot do better.

`python -m bench.followers_floor` runs it with the row's followers and prints the figures as JSON;
`python -m bench.followers_floor --serve READY_FILE RUNS INTERVAL_S` is the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import pathlib
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.job.v1 import telemetry_pb2

from bench.common import floor_server
from common.gc_tuning import tune_for_serving

SERVICE = "starforge.control.v1.ControlService"


class _Run:
    """One run's newest line (serialized response) and the future its followers wait on for the next."""

    def __init__(self) -> None:
        self.message = b""
        self.next: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def print_line(self, seq: int, attempt: int = 1) -> None:
        line = telemetry_pb2.LogLine(attempt_number=attempt, offset=seq, text=f"tick {seq} {time.time():.6f}")
        self.message = ctl.StreamJobLogsResponse(lines=[line]).SerializeToString()
        done, self.next = self.next, asyncio.get_running_loop().create_future()
        done.set_result(None)


async def _serve(ready: pathlib.Path, runs: int, interval: float) -> None:
    table = {f"floor-{i}": _Run() for i in range(runs)}
    for r in table.values():
        r.print_line(0)

    async def follow(request: bytes, context: Any) -> AsyncIterator[bytes]:
        run = table[ctl.StreamJobLogsRequest.FromString(request).job_id]
        yield run.message
        while True:
            await run.next
            yield run.message

    async def ticker(i: int, run: _Run) -> None:
        await asyncio.sleep(interval * i / runs)
        seq = 0
        while True:
            seq += 1
            run.print_line(seq)
            await asyncio.sleep(interval)

    server = grpc.aio.server()
    method = grpc.unary_stream_rpc_method_handler(follow)
    handler = grpc.method_handlers_generic_handler(SERVICE, {"StreamJobLogs": method})
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    tune_for_serving()
    tickers = [asyncio.ensure_future(ticker(i, r)) for i, r in enumerate(table.values())]
    await asyncio.to_thread(ready.write_text, str(port))
    try:
        await server.wait_for_termination()
    finally:
        for t in tickers:
            t.cancel()


@contextlib.contextmanager
def running(runs: int, interval: float) -> Iterator[tuple[int, str, list[str]]]:
    """The floor server in its own process (pinned as the console is): (pid, address, run ids)."""
    args = (str(runs), str(interval))
    with floor_server("bench.followers_floor", *args, what="the followers' floor server") as (pid, address):
        yield pid, address, [f"floor-{i}" for i in range(runs)]


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--serve":
        asyncio.run(_serve(pathlib.Path(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])))
        return
    from bench.followers import measure_floor

    print(json.dumps(measure_floor()))


if __name__ == "__main__":
    main()
