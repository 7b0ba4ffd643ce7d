"""Where the console's IngestService is, and how to trust it: the sender's settings, read (and
refused when wrong) before the training command starts, without importing the sender itself."""

from __future__ import annotations

import ssl


def parse_address(address: str) -> tuple[str, int]:
    """Parse FORGE_INGEST_ADDR ("host:port", "[v6]:port")."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"FORGE_INGEST_ADDR must be host:port, got {address!r}")
    return host.strip("[]"), int(port)


def tls_context(ca_pem: str) -> ssl.SSLContext | None:
    """TLS trusting exactly the CA the control plane sent (FORGE_INGEST_CA_PEM); None: plaintext."""
    if not ca_pem:
        return None
    try:
        ctx = ssl.create_default_context(cadata=ca_pem)
    except (ssl.SSLError, ValueError) as exc:
        raise ValueError(f"FORGE_INGEST_CA_PEM is not a PEM CA bundle ({exc})") from None
    ctx.set_alpn_protocols(["h2"])  # gRPC over TLS negotiates HTTP/2 by ALPN
    return ctx
