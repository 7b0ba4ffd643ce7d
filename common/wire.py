"""What every gRPC client of StarForge sends and accepts, without importing grpc.

`common.channel` (grpcio channels) and `cli.h2unary` (the CLI's HTTP/2 reads) both use these, so
the two transports carry the same token metadata and accept the same message sizes.
"""

from __future__ import annotations

# The largest gRPC message either side accepts (servers use it too: `common.server`).
MAX_MESSAGE_BYTES = 64 * 1024 * 1024


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    """Call metadata carrying a token."""
    return (("authorization", f"Bearer {token}"),)
