"""IngestService on a port of its own (`ingest_listen`), served by gRPC's thread-pool server.

Why: every gRPC completion of a grpc.aio server reaches the event loop through one poller
thread and a socket pair, and with thousands of log followers on the loop a run's telemetry
waited behind their sends before any StarForge code saw it (docs/benchmarks.md, **followers**).
A thread-pool server receives on threads of its own: a batch reaches its handler without the
loop, and only the store and publish (`IngestServicer._apply`) run there, as before.

Each Report stream holds one of the pool's threads (its responses) and a thread of its own that
reads its requests and hands each to the loop. At most `max_streams` authenticated streams run at
once; the next is refused with RESOURCE_EXHAUSTED (the capsule retries it). The limit is counted
after authentication, not by gRPC at a call's arrival: callers without a run token (anyone who
can reach the port, a job's own code) would otherwise fill it and shut the runs out. The pool has
AUTH_THREADS more threads than the limit, for token lookups and GetCursor. The same
`IngestServicer` serves both ports, so a run reports the same way wherever it was told to.

Every call is authenticated in its handler, before any request message is parsed: requests
arrive as raw bytes (at most DEFAULT_RECEIVE_BYTES each, enforced by the transport) and are parsed only
after the caller's token was resolved on the loop, as the main port's `AuthnInterceptor` does.
Errors map to gRPC status exactly as on the main port (`common.rpc_status`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
import threading
from collections.abc import Iterator
from typing import Any

import grpc
from starforge_api.ingest.v1 import ingest_service_pb2 as pb

from common import authn, errors
from common.channel import token_from_metadata
from common.rpc_status import status_for
from common.server import DEFAULT_RECEIVE_BYTES
from control import auth, metrics
from control.services.ingest_service import IngestServicer

SERVICE = "starforge.ingest.v1.IngestService"
REPORT = f"/{SERVICE}/Report"
GET_CURSOR = f"/{SERVICE}/GetCursor"
# Requests of one stream read ahead of the loop: the reader waits for the loop beyond this.
READ_AHEAD = 16
# Pool threads beyond `max_streams`: the token lookups of calls not yet counted, and GetCursor.
AUTH_THREADS = 32
# How often a thread waiting on the loop checks that its call is still alive.
WAIT_SLICE_S = 1.0
_END = object()


class ThreadedIngest:
    """The IngestService handlers of the thread-pool port, over the loop's `IngestServicer`."""

    def __init__(
        self, servicer: IngestServicer, loop: asyncio.AbstractEventLoop, resolve: authn.Resolve, max_streams: int
    ) -> None:
        self.servicer = servicer
        self.loop = loop
        self.resolve = resolve
        self.max_streams = max_streams
        self._open = 0  # authenticated Report streams running
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def _stream_slot(self) -> Iterator[None]:
        """One of the `max_streams` slots for an authenticated stream; RESOURCE_EXHAUSTED when none is free."""
        with self._lock:
            if self._open >= self.max_streams:
                raise errors.ResourceExhausted(
                    f"this ingest port serves at most {self.max_streams} Report streams at once; try again"
                )
            self._open += 1
        metrics.INGEST_PORT_STREAMS.inc()
        try:
            yield
        finally:
            with self._lock:
                self._open -= 1
            metrics.INGEST_PORT_STREAMS.dec()

    def handler(self) -> grpc.GenericRpcHandler:  # type: ignore[type-arg]
        """Both methods, taking raw bytes (parsed after authentication)."""
        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "Report": grpc.stream_stream_rpc_method_handler(
                    self.report, response_serializer=pb.ReportResponse.SerializeToString
                ),
                "GetCursor": grpc.unary_unary_rpc_method_handler(
                    self.get_cursor, response_serializer=pb.GetCursorResponse.SerializeToString
                ),
            },
        )

    def _on_loop(self, coro: Any) -> concurrent.futures.Future[Any]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def _result(self, coro: Any, context: grpc.ServicerContext) -> Any:
        """`coro`'s result, run on the loop; cancelled when the call ends first (the client left,
        the server stops)."""
        future = self._on_loop(coro)
        while True:
            try:
                return future.result(timeout=WAIT_SLICE_S)
            except concurrent.futures.TimeoutError:
                if not context.is_active():
                    future.cancel()
                    raise concurrent.futures.CancelledError() from None

    def _principal(self, method: str, context: grpc.ServicerContext) -> auth.Principal:
        principal: auth.Principal = self._result(
            self.resolve(method, token_from_metadata(context.invocation_metadata())), context
        )
        return principal

    def get_cursor(self, raw: bytes, context: grpc.ServicerContext) -> pb.GetCursorResponse:
        with _mapped(context):
            principal = self._principal(GET_CURSOR, context)
            request = _parse(pb.GetCursorRequest, raw, GET_CURSOR)

            async def call() -> pb.GetCursorResponse:
                auth.bind(principal)
                return await self.servicer.GetCursor(request, None)

            response: pb.GetCursorResponse = self._result(call(), context)
            return response

    def report(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[pb.ReportResponse]:
        with _mapped(context):
            principal = self._principal(REPORT, context)
            with self._stream_slot():
                yield from self._bridged(principal, requests, context)

    def _bridged(
        self, principal: auth.Principal, requests: Iterator[bytes], context: grpc.ServicerContext
    ) -> Iterator[pb.ReportResponse]:
        stream = _BridgedStream(self, principal)
        context.add_callback(stream.cancel)
        stream.start(requests)
        try:
            yield from stream.responses()
        finally:
            stream.cancel()


class _BridgedStream:
    """One Report stream: requests read on a thread and handed to the loop, where the servicer's
    `Report` runs; its responses handed back to the pool thread that sends them."""

    def __init__(self, port: ThreadedIngest, principal: auth.Principal) -> None:
        self.port = port
        self.principal = principal
        self.inbox: asyncio.Queue[Any] = asyncio.Queue()  # filled on the loop only
        self.out: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.credit = threading.Semaphore(READ_AHEAD)
        self.task: concurrent.futures.Future[None] | None = None

    def start(self, requests: Iterator[bytes]) -> None:
        self.task = self.port._on_loop(self._run())
        threading.Thread(target=self._read, args=(requests,), name="ingest-read", daemon=True).start()

    def cancel(self) -> None:
        if self.task is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing runs there any more
                self.task.cancel()  # thread-safe: the task is cancelled on the loop

    def _hand(self, item: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed (the console stopped)
            self.port.loop.call_soon_threadsafe(self.inbox.put_nowait, item)

    def _read(self, requests: Iterator[bytes]) -> None:
        """The stream's requests, parsed, to the loop; at most READ_AHEAD ahead of it."""
        try:
            for raw in requests:
                while not self.credit.acquire(timeout=WAIT_SLICE_S):
                    if self.task is None or self.task.done():
                        return
                self._hand(_parse(pb.ReportRequest, raw, REPORT))
            self._hand(_END)
        except errors.StarforgeError as err:
            self._hand(err)
        except grpc.RpcError:  # the call ended (cancelled, deadline): the task is cancelled too
            self._hand(_END)
        except Exception as exc:
            self._hand(exc)

    async def _requests(self) -> Any:
        while True:
            item = await self.inbox.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            self.credit.release()  # a message taken: the reader may read one more
            yield item

    async def _run(self) -> None:
        auth.bind(self.principal)
        try:
            async for response in self.port.servicer.Report(self._requests(), None):
                self.out.put(response)
            self.out.put(_END)
        except BaseException as exc:
            self.out.put(exc)
            if not isinstance(exc, Exception):
                raise

    def responses(self) -> Iterator[pb.ReportResponse]:
        """The servicer's responses, until it ends; a task cancelled before it ran puts nothing."""
        while True:
            try:
                item = self.out.get(timeout=WAIT_SLICE_S)
            except queue.Empty:
                if self.task is not None and self.task.done() and self.out.empty():
                    raise concurrent.futures.CancelledError() from None
                continue
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item


def _parse(cls: Any, raw: bytes, method: str) -> Any:
    """The request, as the main port's `AuthnInterceptor` parses and refuses it."""
    request = authn.checked(cls.FromString, DEFAULT_RECEIVE_BYTES)(raw)
    authn.refuse_unreadable(request, method)
    return request


class _mapped:
    """Errors of a handler to its call's status (`common.rpc_status.status_for`, as the main
    port's `ErrorInterceptor`); a call cancelled meanwhile ends CANCELLED."""

    def __init__(self, context: grpc.ServicerContext) -> None:
        self.context = context

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None or isinstance(exc, GeneratorExit):
            return
        if isinstance(exc, asyncio.CancelledError | concurrent.futures.CancelledError):
            self.context.abort(grpc.StatusCode.CANCELLED, "the call was cancelled")
        if isinstance(exc, Exception):
            self.context.abort_with_status(status_for(exc))


class IngestPort:
    """The ingest port's thread-pool server: bound by `bind`, serving once `serve` is called."""

    def __init__(self, address: str, *, max_streams: int, credentials: grpc.ServerCredentials | None = None) -> None:
        """Bind `address` (no handler yet, not started); OSError when it cannot be bound."""
        self.max_streams = max_streams
        self.pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_streams + AUTH_THREADS, thread_name_prefix="ingest"
        )
        self.server = grpc.server(
            self.pool,
            options=[
                ("grpc.max_receive_message_length", DEFAULT_RECEIVE_BYTES),
                ("grpc.keepalive_time_ms", 30_000),
                ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.so_reuseport", 0),
            ],
        )
        try:  # grpc's thread-pool server raises where grpc.aio's answers port 0
            port = (
                self.server.add_secure_port(address, credentials)
                if credentials
                else self.server.add_insecure_port(address)
            )
        except RuntimeError:
            port = 0
        if port == 0:
            self.pool.shutdown(wait=False)
            raise OSError(f"cannot listen on {address}: address in use or not available")
        self.port = port

    def serve(self, servicer: IngestServicer, loop: asyncio.AbstractEventLoop, resolve: authn.Resolve) -> None:
        """Add the IngestService handlers over `servicer` (its calls run on `loop`) and start."""
        self.server.add_generic_rpc_handlers((ThreadedIngest(servicer, loop, resolve, self.max_streams).handler(),))
        self.server.start()

    async def stop(self, grace: float) -> None:
        """Stop: open streams get `grace` seconds, then are cancelled; their tasks end on the loop,
        which must run until this returns. Then the pool's threads go."""
        stopped = self.server.stop(grace)
        await asyncio.to_thread(stopped.wait, grace + 5.0)
        self.pool.shutdown(wait=False)
