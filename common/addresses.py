"""Which addresses name this machine only: the loopback rule of `common.tls`, in a module of its own
so that a client (`sf`) can apply it without importing the TLS and configuration machinery."""

from __future__ import annotations

import ipaddress

LOOPBACK_NAMES = ("localhost", "ip6-localhost")


def host_of(address: str) -> str:
    """The host of "host:port", "[v6]:port" or a URL ("https://host:port/path")."""
    rest = address.split("://", 1)[-1].split("/", 1)[0]
    if rest.startswith("["):
        return rest[1:].split("]", 1)[0]
    if rest.count(":") > 1:  # a bare IPv6 address without a port
        return rest
    return rest.rsplit(":", 1)[0] if ":" in rest else rest


def is_loopback(address: str) -> bool:
    """True when `address` (host:port or URL) names this machine only (127.0.0.0/8, ::1, localhost)."""
    if address.startswith("unix:"):
        return True
    host = host_of(address).lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name other than localhost, or a wildcard like 0.0.0.0: reachable from outside
