"""The HTTP port's server: bounded threads, bytes and time per connection, whoever connects.

The stdlib ThreadingHTTPServer starts a thread per accepted connection and then waits, without a
time limit, for the request to arrive: a few hundred half-open connections held hundreds of
threads. Here one selector thread accepts connections and reads each request head (request line
and headers) without a thread; a connection gets a thread only once its whole head arrived, and:

- its head must arrive within `header_timeout` seconds and fit in `max_header_bytes` (408 / 431);
- at most `max_connections` requests are served (one thread each) at once; beyond, a request
  is answered 503 at once, from the selector thread;
- at most `max_pending` connections may be sending their head (a socket and a small buffer
  each, no thread); beyond, the oldest of them is answered 503 and closed to make room: a client
  that sends its request at once is never the oldest, a half-open flood evicts itself;
- a served connection that neither sends nor takes bytes for `idle_timeout` seconds is closed
  (a blob download to a reader that stopped reading);
- one request per connection (no keep-alive: a second head would be read in a thread).

With an `ssl_context`, connections are wrapped as they are accepted and their TLS handshake is
driven by the selector thread too (non-blocking), within the same header deadline.

Routes are unchanged: handlers subclass `BoundedHandler`, a BaseHTTPRequestHandler.
"""

from __future__ import annotations

import contextlib
import http.server
import io
import logging
import selectors
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from control import metrics

log = logging.getLogger("starforge.http")
SELECT_SECONDS = 0.25


@dataclass(frozen=True)
class HttpLimits:
    max_connections: int = 256
    header_timeout: float = 10.0
    idle_timeout: float = 60.0
    max_header_bytes: int = 16384
    max_pending: int = 1024


def _status(code: int, text: str) -> bytes:
    body = f"{text}\n".encode()
    return (
        f"HTTP/1.0 {code} {text}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body


BUSY = _status(503, "Service Unavailable")
TOO_SLOW = _status(408, "Request Timeout")
TOO_LARGE = _status(431, "Request Header Fields Too Large")


class _HeadThenSocket(io.RawIOBase):
    """The bytes the selector already read (the request head, maybe more), then the socket."""

    def __init__(self, head: bytes, sock: socket.socket) -> None:
        self._head = memoryview(head)
        self._sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        if self._head:
            n = min(len(buf), len(self._head))
            buf[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        return self._sock.recv_into(buf)


class BoundedHandler(http.server.BaseHTTPRequestHandler):
    """A request handler for BoundedHTTPServer: its head comes from the server, one request only."""

    def setup(self) -> None:
        super().setup()
        server: BoundedHTTPServer = self.server  # type: ignore[assignment]
        self.rfile = io.BufferedReader(_HeadThenSocket(server.head_for_this_thread(), self.connection))

    def handle(self) -> None:
        self.close_connection = True
        self.handle_one_request()


@dataclass
class _Pending:
    address: Any
    deadline: float
    head: bytearray = field(default_factory=bytearray)
    # TLS: the handshake is done (always True for plaintext connections).
    secured: bool = True


class BoundedHTTPServer:
    """Serves `handler` (a BoundedHandler) on `address` within `limits`; see the module doc."""

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BoundedHandler],
        limits: HttpLimits,
        *,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.RequestHandlerClass = handler
        self._ssl = ssl_context
        self.limits = limits
        self.socket = socket.create_server(address, backlog=1024)
        self.socket.setblocking(False)
        self.server_address = self.socket.getsockname()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.socket, selectors.EVENT_READ)
        self._pending: dict[socket.socket, _Pending] = {}
        self._serving = 0
        self._lock = threading.Lock()
        self._local = threading.local()
        self._stop = threading.Event()
        self._stopped = threading.Event()

    # the selector thread

    def serve_forever(self) -> None:
        try:
            while not self._stop.is_set():
                for key, _ in self._selector.select(SELECT_SECONDS):
                    if key.fileobj is self.socket:
                        self._accept_waiting()
                    else:
                        self._read_head(key.fileobj)  # type: ignore[arg-type]
                self._close_late(time.monotonic())
        finally:
            self._stopped.set()

    def _accept_waiting(self) -> None:
        while True:
            try:
                conn, address = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # out of file descriptors: the waiting connections stay queued
                log.warning("http: accept failed: %s", e)
                time.sleep(SELECT_SECONDS)
                return
            conn.setblocking(False)
            if self._ssl is not None:
                try:
                    conn = self._ssl.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
                except (ssl.SSLError, OSError):
                    conn.close()
                    continue
            if len(self._pending) >= self.limits.max_pending:
                oldest = next(iter(self._pending))
                self._forget(oldest)
                self._answer_and_close(oldest, BUSY)
                metrics.HTTP_CONNECTIONS_REFUSED.inc()
            self._pending[conn] = _Pending(
                address, time.monotonic() + self.limits.header_timeout, secured=self._ssl is None
            )
            self._selector.register(conn, selectors.EVENT_READ)

    def _shake_hands(self, conn: socket.socket, p: _Pending) -> bool:
        """Advance a TLS handshake without blocking; True once it is done. A failed one closes."""
        try:
            conn.do_handshake()  # type: ignore[attr-defined]
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return False  # the rest arrives later, within the header deadline
        except OSError:
            self._forget(conn)
            conn.close()
            return False
        p.secured = True
        return True

    def _receive(self, conn: socket.socket) -> bytes | None:
        """What the connection has sent now (b"" when it closed, None when nothing is there yet);
        TLS records already decrypted by OpenSSL are taken too, since the socket will not wake the
        selector for them."""
        data = b""
        while True:
            try:
                chunk = conn.recv(65536)
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return data or None
            except OSError:
                return data
            if not chunk:
                return data
            data += chunk
            if not isinstance(conn, ssl.SSLSocket) or not conn.pending():
                return data

    def _read_head(self, conn: socket.socket) -> None:
        p = self._pending[conn]
        if not p.secured and not self._shake_hands(conn, p):
            return
        data = self._receive(conn)
        if data is None:
            return
        if not data:
            self._forget(conn)
            conn.close()
            return
        start = max(0, len(p.head) - 3)  # a blank line may straddle two reads; never rescan the rest
        p.head += data
        end = _head_end(p.head, start)
        if (end < 0 and len(p.head) > self.limits.max_header_bytes) or end > self.limits.max_header_bytes:
            self._forget(conn)
            self._answer_and_close(conn, TOO_LARGE)
            return
        if end < 0:
            return
        self._forget(conn)
        with self._lock:
            busy = self._serving >= self.limits.max_connections
            if not busy:
                self._serving += 1
        if busy:
            self._answer_and_close(conn, BUSY)
            metrics.HTTP_CONNECTIONS_REFUSED.inc()
            return
        conn.setblocking(True)
        conn.settimeout(self.limits.idle_timeout)
        threading.Thread(
            target=self._serve, args=(conn, p.address, bytes(p.head)), name="http-request", daemon=True
        ).start()

    def _close_late(self, now: float) -> None:
        for conn in [c for c, p in self._pending.items() if p.deadline <= now]:
            self._forget(conn)
            self._answer_and_close(conn, TOO_SLOW)
            metrics.HTTP_CONNECTIONS_TIMED_OUT.inc()

    def _forget(self, conn: socket.socket) -> None:
        del self._pending[conn]
        self._selector.unregister(conn)

    @staticmethod
    def _answer_and_close(conn: socket.socket, answer: bytes) -> None:
        """Answer without waiting (a full send buffer loses the answer, never a thread) and close."""
        try:
            conn.setblocking(False)
            conn.send(answer)
            conn.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        conn.close()

    # request threads

    def head_for_this_thread(self) -> bytes:
        head: bytes = self._local.head
        return head

    def _serve(self, conn: socket.socket, address: Any, head: bytes) -> None:
        self._local.head = head
        try:
            self.RequestHandlerClass(conn, address, self)  # type: ignore[arg-type]
        except Exception:
            log.debug("http: request from %s failed", address, exc_info=True)
        finally:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_WR)
            conn.close()
            with self._lock:
                self._serving -= 1

    # life cycle (the names and behaviour of socketserver's)

    def shutdown(self) -> None:
        """Stop serve_forever and wait for it to return (requests in flight finish on their own)."""
        self._stop.set()
        self._stopped.wait()

    def server_close(self) -> None:
        for conn in list(self._pending):
            self._forget(conn)
            conn.close()
        self._selector.close()
        self.socket.close()


def _head_end(buf: bytearray, start: int) -> int:
    """Where the request head ends (index of its blank line at or after `start`), or -1."""
    ends = [i for i in (buf.find(b"\r\n\r\n", start), buf.find(b"\n\n", start)) if i >= 0]
    return min(ends) if ends else -1
