"""Ports for services that a test names before they bind: below the kernel's ephemeral range.

Binding port 0 gives a port from the ephemeral range (net.ipv4.ip_local_port_range), and a port
from there can be taken between the test choosing it and the service binding it, or while a
service the test restarts is down: by any process's outgoing connection, by another test's
server binding port 0, or by a client retrying towards the port, which Linux may connect to
itself. The service then fails with "Address already in use", or the test reaches whatever took
the port (a browser got an invalid HTTP response from one). A port below that range is never
handed out by the kernel.
"""

from __future__ import annotations

import pathlib
import random
import socket

LOWEST = 10_000


def free_port() -> int:
    """A port on 127.0.0.1 that is free now, below the kernel's ephemeral range."""
    low = int(pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(200):
        port = random.randrange(LOWEST, low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port between {LOWEST} and {low}")
