"""A synchronous gRPC client for unary calls: HTTP/2 (the pure-Python `h2`) over a socket or `ssl`.

`sf job ls` and `sf job status` make one or two unary reads and exit. grpcio's import alone costs
them ~65 ms of CPU (its Cython core imports asyncio eagerly; docs/benchmarks.md, **cli**), more
than the call. This module speaks just enough gRPC for such a call: one connection, one stream per
call, the request as one length-prefixed message, the response as at most one, the status from the
trailers (or a trailers-only response).

It sends what grpcio's sync client sends for a call of `cli.client` (the path, `te: trailers`,
the content type, `grpc-timeout` and the caller's metadata: the bearer token), verifies TLS as the
grpcio channel does (the CA file given, the console's host name or IP address against its
certificate, ALPN `h2`), and reads at most `max_receive` bytes of message (the grpcio channel's
limit) however the server frames it. What it cannot do exactly as grpcio would raises `Fallback`
before or instead of an answer, and the caller makes the call through grpcio: no connection (the
console down, a TLS handshake refused: nothing was sent, so grpcio's own message and retries
apply), an answer that is not a plain gRPC response (HTTP errors, compression, a reset or GOAWAY
before the status). The callers use it for idempotent reads only, so a call made again is safe.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import time
from typing import TYPE_CHECKING

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

if TYPE_CHECKING:
    import ssl

DEADLINE_EXCEEDED = 4
RESOURCE_EXHAUSTED = 8
_READ = 65_536
_WINDOW = 1 << 20  # what the server may send ahead of our reads (a bound, with max_receive, on memory)
_STRIPPED = frozenset({"grpc-status", "grpc-message", "content-type"})  # not in grpcio's trailing metadata


class Fallback(Exception):
    """This call is not one this module completes as grpcio would: make it through grpcio."""


class Status(Exception):
    """A call that ended with a non-OK gRPC status (or one this client decided: deadline, size).

    A plain class (a dataclass compiles its methods at import: ~0.3 ms of `sf`'s start)."""

    def __init__(self, code: int, message: str, trailers: tuple[tuple[str, str | bytes], ...] = ()) -> None:
        self.code, self.message, self.trailers = code, message, trailers

    def __repr__(self) -> str:
        return f"Status(code={self.code!r}, message={self.message!r}, trailers={self.trailers!r})"


def split_address(address: str) -> tuple[str, int]:
    """`host:port` or `[v6]:port` as (host, port); Fallback for anything else (grpcio resolves those)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise Fallback(f"address {address!r}")
    return host.removeprefix("[").removesuffix("]"), int(port)


def tls_context(ca_pem: str) -> ssl.SSLContext:
    """A client context trusting only the certificates of `ca_pem`, verifying the peer's name (host
    name or IP address, as grpc core does), offering only `h2`. ValueError when none load."""
    import ssl

    try:
        ctx = ssl.create_default_context(cadata=ca_pem)  # CERT_REQUIRED, check_hostname
    except ssl.SSLError as exc:
        raise ValueError(f"CA bundle: {exc}") from None
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2  # what grpc core accepts at least
    ctx.set_alpn_protocols(["h2"])
    return ctx


def _resolvable(host: str) -> str | bytes:
    """`host` for getaddrinfo: an IP address as ASCII bytes, which it reads as it reads the text,
    without the `idna` codec it loads for any text host (~1 ms of `sf`'s start); a name as is."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return host
    return host.encode("ascii")


def _open(host: str, port: int, tls: ssl.SSLContext | None, timeout: float) -> socket.socket:
    """A connected socket (TLS verified when `tls`); Fallback when there is none to be had."""
    try:
        # getaddrinfo takes bytes as well as str; typeshed's create_connection says str only
        sock = socket.create_connection((_resolvable(host), port), timeout=timeout)  # type: ignore[arg-type]
    except TimeoutError:
        raise Status(DEADLINE_EXCEEDED, "Deadline Exceeded") from None
    except OSError as exc:
        raise Fallback(f"connect: {exc}") from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if tls is None:
        return sock
    try:
        wrapped = tls.wrap_socket(sock, server_hostname=host)
    except OSError as exc:  # ssl.SSLError, a verification failure among them: nothing was sent
        sock.close()
        raise Fallback(f"TLS: {exc}") from None
    if wrapped.selected_alpn_protocol() != "h2":
        wrapped.close()
        raise Fallback("the server did not agree to HTTP/2")
    return wrapped


def frame(message: bytes) -> bytes:
    """One gRPC length-prefixed message (not compressed)."""
    return struct.pack(">BI", 0, len(message)) + message


def percent_decode(value: bytes) -> str:
    """grpc-message as grpcio reads it: %XX decoded (a malformed escape kept as is), then UTF-8."""
    out = bytearray()
    i = 0
    while i < len(value):
        hexpair = value[i + 1 : i + 3]
        if value[i] == 0x25 and len(hexpair) == 2 and all(c in b"0123456789abcdefABCDEF" for c in hexpair):
            out.append(int(hexpair, 16))
            i += 3
        else:
            out.append(value[i])
            i += 1
    return out.decode("utf-8", "replace")


def _binary(value: bytes) -> bytes:
    """A `-bin` metadata value: base64, padding optional (as gRPC sends it)."""
    import base64

    return base64.b64decode(value + b"=" * (-len(value) % 4))


def _timeout_header(seconds: float) -> str:
    """`grpc-timeout` in milliseconds (at most 8 digits, as the protocol allows)."""
    return f"{max(1, min(int(seconds * 1000), 99_999_999))}m"


class _Call:
    """The state of one unary call's stream: headers seen, message bytes, status."""

    def __init__(self, max_receive: int) -> None:
        self.max_receive = max_receive
        self.headers: dict[bytes, bytes] | None = None
        self.body = bytearray()
        self.trailers: list[tuple[bytes, bytes]] | None = None
        self.ended = False

    def on_headers(self, headers: list[tuple[bytes, bytes]]) -> None:
        if self.headers is None:
            self.headers = dict(headers)
            if self.headers.get(b":status") != b"200" or not self.headers.get(b"content-type", b"").startswith(
                b"application/grpc"
            ):
                raise Fallback("not a gRPC response")
            if b"grpc-status" in self.headers:  # trailers-only: the status came with the headers
                self.trailers = list(headers)
        else:
            self.trailers = list(headers)

    def on_data(self, data: bytes) -> None:
        if self.headers is None:
            raise Fallback("data before headers")
        self.body += data
        if len(self.body) > 5:
            flag, size = struct.unpack(">BI", self.body[:5])
            if flag != 0:
                raise Fallback("a compressed message")
            if size > self.max_receive:
                raise Status(RESOURCE_EXHAUSTED, f"Received message larger than max ({size} vs. {self.max_receive})")
        if len(self.body) > self.max_receive + 5:  # a second message (a unary call has one): stop reading
            raise Fallback("more than one message")

    def result(self) -> bytes:
        """The response message, or the Status the trailers say."""
        if self.trailers is None:
            raise Fallback("the stream ended without a status")
        trailers = dict(self.trailers)
        code = int(trailers.get(b"grpc-status", b"2"))
        if code != 0:
            raise Status(code, percent_decode(trailers.get(b"grpc-message", b"")), _metadata(self.trailers))
        if len(self.body) < 5 or len(self.body) != 5 + struct.unpack(">I", self.body[1:5])[0]:
            raise Fallback("not one whole message")
        return bytes(self.body[5:])


def _metadata(pairs: list[tuple[bytes, bytes]]) -> tuple[tuple[str, str | bytes], ...]:
    """Trailers as grpcio's `trailing_metadata()`: without the status keys, `-bin` values decoded."""
    out: list[tuple[str, str | bytes]] = []
    for raw_key, value in pairs:
        key = raw_key.decode("ascii", "replace")
        if key.startswith(":") or key in _STRIPPED:
            continue
        out.append((key, _binary(value) if key.endswith("-bin") else value.decode("utf-8", "replace")))
    return tuple(out)


class Channel:
    """One HTTP/2 connection to a gRPC server, for unary calls one after another."""

    def __init__(
        self, address: str, *, tls: ssl.SSLContext | None, timeout: float, max_receive: int, authority: str = ""
    ) -> None:
        host, port = split_address(address)
        self.authority = authority or address
        self.scheme = "https" if tls is not None else "http"
        self.max_receive = max_receive
        self.sock = _open(host, port, tls, timeout)
        config = h2.config.H2Configuration(client_side=True, header_encoding=None)
        self.conn = h2.connection.H2Connection(config=config)
        self.conn.initiate_connection()
        self.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: _WINDOW})
        self.conn.increment_flow_control_window(_WINDOW)
        self._flush()

    def unary(self, path: str, request: bytes, metadata: tuple[tuple[str, str], ...], timeout: float) -> bytes:
        """Call `path` with one serialized request; the serialized response, or Status / Fallback."""
        deadline = time.monotonic() + timeout
        stream = self.conn.get_next_available_stream_id()
        headers = [
            (":method", "POST"),
            (":scheme", self.scheme),
            (":path", path),
            (":authority", self.authority),
            ("te", "trailers"),
            ("content-type", "application/grpc"),
            ("grpc-timeout", _timeout_header(timeout)),
            *metadata,
        ]
        self.conn.send_headers(stream, headers)
        self._send_body(stream, frame(request), deadline)
        call = _Call(self.max_receive)
        while not call.ended:
            self._receive(stream, call, deadline)
        return call.result()

    def _send_body(self, stream: int, body: bytes, deadline: float) -> None:
        """The request as DATA frames within the peer's flow-control window, then END_STREAM."""
        view = memoryview(body)
        while view:
            room = min(self.conn.local_flow_control_window(stream), self.conn.max_outbound_frame_size, len(view))
            if room <= 0:
                self._flush()
                self._receive(stream, None, deadline)  # wait for a WINDOW_UPDATE
                continue
            self.conn.send_data(stream, bytes(view[:room]))
            view = view[room:]
        self.conn.end_stream(stream)
        self._flush()

    def _receive(self, stream: int, call: _Call | None, deadline: float) -> None:
        """Read once from the socket and apply its events to `call` (None: only connection events)."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise Status(DEADLINE_EXCEEDED, "Deadline Exceeded")
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(_READ)
        except TimeoutError:
            raise Status(DEADLINE_EXCEEDED, "Deadline Exceeded") from None
        except OSError as exc:
            raise Fallback(f"read: {exc}") from None
        if not data:
            raise Fallback("the server closed the connection")
        try:
            events = self.conn.receive_data(data)
        except h2.exceptions.ProtocolError as exc:
            raise Fallback(f"HTTP/2: {exc}") from None
        for event in events:
            self._apply(event, stream, call)
        self._flush()

    def _apply(self, event: h2.events.Event, stream: int, call: _Call | None) -> None:
        if isinstance(event, h2.events.ConnectionTerminated | h2.events.StreamReset):
            raise Fallback(f"the server ended the call: {event}")
        if getattr(event, "stream_id", stream) != stream or call is None:
            return
        if isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived):
            call.on_headers(list(event.headers or []))  # bytes: header_encoding=None
        elif isinstance(event, h2.events.DataReceived):
            call.on_data(event.data or b"")
            self.conn.acknowledge_received_data(event.flow_controlled_length, stream)
        elif isinstance(event, h2.events.StreamEnded):
            call.ended = True

    def _flush(self) -> None:
        out = self.conn.data_to_send()
        if out:
            try:
                self.sock.sendall(out)
            except OSError as exc:
                raise Fallback(f"write: {exc}") from None

    def close(self) -> None:
        try:
            self.conn.close_connection()
            self._flush()
        except (Fallback, h2.exceptions.ProtocolError):
            pass
        self.sock.close()
