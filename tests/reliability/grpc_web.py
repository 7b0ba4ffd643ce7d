"""A small grpc-web client (what a browser sends through envoy), for the reliability tests.

Requests are POSTs of `application/grpc-web+proto` bodies: one length-prefixed frame
(flag byte 0x00, 4-byte big-endian length, the message). The answer is a sequence of such frames;
a frame with flag 0x80 carries the trailers (`grpc-status`, `grpc-message`) as HTTP header lines.
A call that fails before any message may answer with the status in the HTTP headers instead.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TypeVar
from urllib.parse import unquote

import httpx
from google.protobuf.message import Message

M = TypeVar("M", bound=Message)
CONTENT_TYPE = "application/grpc-web+proto"


class GrpcWebError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"grpc-status {status}: {message}")
        self.status = status
        self.message = message


def frame(message: Message) -> bytes:
    body = message.SerializeToString()
    return b"\x00" + len(body).to_bytes(4, "big") + body


def _trailers(payload: bytes) -> dict[str, str]:
    out = {}
    for line in payload.decode(errors="replace").split("\r\n"):
        if ":" in line:
            k, v = line.split(":", 1)
            out[k.strip().lower()] = v.strip()
    return out


def _check(headers: dict[str, str] | httpx.Headers) -> None:
    status = headers.get("grpc-status")
    if status is not None and status != "0":
        raise GrpcWebError(int(status), unquote(headers.get("grpc-message", "")))


async def stream(
    client: httpx.AsyncClient, base_url: str, method: str, request: Message, response_cls: type[M], token: str
) -> AsyncIterator[M]:
    """Call `/<service>/<method>` and yield each response message; raise GrpcWebError on a status."""
    headers = {"content-type": CONTENT_TYPE, "x-grpc-web": "1", "authorization": f"Bearer {token}"}
    async with client.stream("POST", f"{base_url}/{method}", content=frame(request), headers=headers) as r:
        if r.status_code != 200:
            raise GrpcWebError(14, f"HTTP {r.status_code}")
        _check(r.headers)
        buf = b""
        trailers_seen = False
        async for chunk in r.aiter_bytes():
            buf += chunk
            while len(buf) >= 5:
                size = int.from_bytes(buf[1:5], "big")
                if len(buf) < 5 + size:
                    break
                flag, payload, buf = buf[0], buf[5 : 5 + size], buf[5 + size :]
                if flag & 0x80:
                    trailers_seen = True
                    _check(_trailers(payload))
                else:
                    msg = response_cls()
                    msg.ParseFromString(payload)
                    yield msg
        if not trailers_seen and r.headers.get("grpc-status") is None:
            raise GrpcWebError(14, "the stream ended without trailers")


async def unary(
    client: httpx.AsyncClient, base_url: str, method: str, request: Message, response_cls: type[M], token: str
) -> M:
    got = [m async for m in stream(client, base_url, method, request, response_cls, token)]
    if len(got) != 1:
        raise GrpcWebError(13, f"{len(got)} messages for a unary call")
    return got[0]
