"""Client channels: one place for keepalive, message sizes and bearer-token metadata."""

from __future__ import annotations

import grpc

# The message size limit and the token metadata live in common.wire (no grpc import), so that the
# CLI's HTTP/2 reads share them; re-exported here for the grpcio channels and servers.
from common.wire import MAX_MESSAGE_BYTES, bearer

__all__ = [
    "CHANNEL_OPTIONS",
    "MAX_MESSAGE_BYTES",
    "aio_channel",
    "bearer",
    "token_from_authorization",
    "token_from_metadata",
]

CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.enable_retries", 0),
    # Reconnect fast after a server restart: the first retry after 100 ms, then at most every 2 s
    # (gRPC's defaults: 1 s, growing to 120 s). Not grpc.min_reconnect_backoff_ms: gRPC core uses
    # it as the least time a connection attempt may take before it is abandoned (20 s by default),
    # and at 100 ms a server slower than that to send its HTTP/2 SETTINGS (busy, restarting,
    # across a slow network or a TLS handshake) failed every fresh call with UNAVAILABLE at once.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2_000),
]


def aio_channel(address: str, credentials: grpc.ChannelCredentials | None = None) -> grpc.aio.Channel:
    """A grpc.aio channel to `address`: TLS with `credentials` (`common.tls`), else plaintext."""
    if credentials is not None:
        return grpc.aio.secure_channel(address, credentials, options=CHANNEL_OPTIONS)
    return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)


def token_from_metadata(metadata: object) -> str | None:
    """The bearer token of an incoming call, or None. The scheme is case-insensitive ("Bearer",
    "bearer", "BEARER"), as HTTP authentication schemes are."""
    for key, value in metadata or ():  # type: ignore[attr-defined]
        if key == "authorization" and isinstance(value, str):
            return token_from_authorization(value)
    return None


def token_from_authorization(value: str | None) -> str | None:
    """The token of an authorization header value "Bearer <token>" (any case of the scheme)."""
    scheme, _, token = (value or "").strip().partition(" ")
    return (token.strip() or None) if scheme.lower() == "bearer" else None
