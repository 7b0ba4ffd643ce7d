"""The executor's gRPC channels to the blob services it fetches from, kept open between launches.

A launch fetches at least the attempt's own capsule.json, so with a channel per launch every
launch paid a TCP connect and an HTTP/2 handshake on both ends (and a TLS handshake where the
control plane serves TLS) for one small read. `BlobChannels` keeps one channel per (address, CA)
and event loop, the least recently used few at most.

Nothing of a caller is in a channel: every call carries the attempt's own run token as metadata
(`common.channel.bearer`), and the channel's TLS trust is its key. A launch whose fetch finds the
blob service unreachable drops its channel (`discard`), so the next launch connects afresh rather
than waiting out a reconnect backoff.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict

import grpc

from common.channel import aio_channel
from common.tls import ca_credentials

# Distinct blob services an executor talks to at once: one control plane, or a few behind
# different addresses during a move. Past this, the least recently used channel is retired.
MAX_CHANNELS = 4
# A retired channel takes no new call; the fetches still running on it have this long to end
# (a blob's own deadline grows with its size), and the executor's close ends them at once.
RETIRED_GRACE_SECONDS = 6 * 3600.0

# (event loop, address, CA PEM): a channel serves only the loop it was made in; the loop itself,
# not its id, so that a later loop can never be taken for a closed one that had the same id
_Key = tuple[asyncio.AbstractEventLoop, str, str]


class BlobChannels:
    """Open channels by (event loop, address, CA); `close` closes them all."""

    def __init__(self, limit: int = MAX_CHANNELS) -> None:
        self.limit = max(1, limit)
        self._open: OrderedDict[_Key, grpc.aio.Channel] = OrderedDict()
        # retired channels, by the task that closes each once its calls end
        self._retiring: dict[asyncio.Task[None], grpc.aio.Channel] = {}

    def get(self, address: str, ca_pem: str) -> grpc.aio.Channel:
        """The open channel to `address` trusting `ca_pem` (plaintext when empty), made on first use."""
        key = (asyncio.get_running_loop(), address, ca_pem)
        channel = self._open.get(key)
        if channel is not None:
            self._open.move_to_end(key)
            return channel
        channel = aio_channel(address, ca_credentials(ca_pem))
        self._open[key] = channel
        while len(self._open) > self.limit:
            _, old = self._open.popitem(last=False)
            self._retire(old)
        return channel

    def discard(self, channel: grpc.aio.Channel) -> None:
        """Forget `channel` (its service was unreachable); the next `get` makes a new one."""
        for key, open_channel in list(self._open.items()):
            if open_channel is channel:
                del self._open[key]
                self._retire(channel)

    async def close(self) -> None:
        """Close every channel of the running loop at once, retired ones included (the channels
        of other loops went with their loops)."""
        loop = asyncio.get_running_loop()
        mine = [c for (made_in, _, _), c in self._open.items() if made_in is loop]
        self._open.clear()
        retiring, self._retiring = self._retiring, {}
        for task in retiring:
            task.cancel()
        await asyncio.gather(*retiring, return_exceptions=True)
        await asyncio.gather(*(c.close(None) for c in [*mine, *retiring.values()]), return_exceptions=True)

    def _retire(self, channel: grpc.aio.Channel) -> None:
        """Close `channel` once the calls running on it end (RETIRED_GRACE_SECONDS at most)."""
        task = asyncio.ensure_future(channel.close(RETIRED_GRACE_SECONDS))
        self._retiring[task] = channel
        task.add_done_callback(lambda t: self._retiring.pop(t, None))
