"""The control plane's HTTP port: /healthz, Prometheus /metrics, GET /v1/blobs/<sha256>, the web UI.

Blobs over plain HTTP exist for pods that fetch their capsule with the image's own Python before
anything else runs (the kuberay executor's init container); they take the same bearer tokens
and scope rules as BlobService.ReadBlob. Runs in its own threads (stdlib ThreadingHTTPServer) so
large downloads never block the event loop; token checks hop onto the loop. The server
(control.http_limits) bounds the threads, time and bytes any connection can take.
"""

from __future__ import annotations

import asyncio
import http.server
import logging
import mimetypes
import pathlib
import re
import ssl
import threading

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from common import errors
from common.channel import token_from_authorization
from control import metrics
from control.auth import Principal, TokenVerifier
from control.blob_access import BlobAccess
from control.blobstore import BlobStore
from control.http_limits import BoundedHandler, BoundedHTTPServer, HttpLimits

log = logging.getLogger("starforge.http")
BLOB_PATH = re.compile(r"^/v1/blobs/([0-9a-f]{64})$")


class OpsServer:
    def __init__(
        self,
        listen: str,
        store: BlobStore,
        verifier: TokenVerifier,
        access: BlobAccess,
        loop: asyncio.AbstractEventLoop,
        ui_dir: pathlib.Path | None = None,
        ssl_context: ssl.SSLContext | None = None,
        limits: HttpLimits | None = None,
    ) -> None:
        host, _, port = listen.rpartition(":")
        ops = self

        class Handler(BoundedHandler):
            server_version = "starforge"

            def log_message(self, fmt: str, *args: object) -> None:
                log.debug("http %s", fmt % args)

            def _send(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path == "/healthz":
                    self._send(200, b"ok\n")
                    return
                if self.path == "/metrics":
                    self._send(200, generate_latest(metrics.REGISTRY), CONTENT_TYPE_LATEST)
                    return
                m = BLOB_PATH.match(self.path)
                if m is not None:
                    ops.serve_blob(self, m.group(1))
                    return
                static = ops.static_file(self.path)
                if static is None:
                    self._send(404, b"not found\n")
                    return
                ctype = mimetypes.guess_type(static.name)[0] or "application/octet-stream"
                self._send(200, static.read_bytes(), ctype)

        self.ui_dir = ui_dir.resolve() if ui_dir is not None else None
        self.store = store
        self.verifier = verifier
        self.access = access
        self.loop = loop
        # TLS connections are wrapped as they are accepted and shake hands on the selector thread
        # without blocking it (see control.http_limits), so a slow or hostile client holds no thread.
        self.httpd = BoundedHTTPServer(
            (host or "127.0.0.1", int(port)), Handler, limits or HttpLimits(), ssl_context=ssl_context
        )
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="http-ops", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def static_file(self, path: str) -> pathlib.Path | None:
        """A file of the built UI for a request path ("/" is index.html), never outside ui_dir."""
        if self.ui_dir is None:
            return None
        rel = path.split("?", 1)[0].lstrip("/") or "index.html"
        target = (self.ui_dir / rel).resolve()
        if not target.is_relative_to(self.ui_dir) or not target.is_file():
            return None
        return target

    def _principal(self, header: str | None) -> Principal:
        token = token_from_authorization(header)
        return asyncio.run_coroutine_threadsafe(self.verifier.verify(token), self.loop).result(30)

    def serve_blob(self, h: http.server.BaseHTTPRequestHandler, digest: str) -> None:
        try:
            p = self._principal(h.headers.get("Authorization"))
            if p.kind not in ("pat", "run", "executor"):
                raise errors.PermissionDenied(f"a {p.kind} token cannot read blobs")
            ok: bool = asyncio.run_coroutine_threadsafe(self.access.may_read(p, digest), self.loop).result(30)
            if not ok and p.kind == "run":
                raise errors.PermissionDenied("this run token may only read its own attempt's blobs")
            if not ok:  # the answer for content that does not exist: nothing to probe
                raise errors.NotFound(f"blob {digest} not found")
            size = self.store.size(digest)
        except errors.StarforgeError as e:
            code = {
                errors.Unauthenticated: 401,
                errors.PermissionDenied: 403,
                errors.NotFound: 404,
            }.get(type(e), 400)
            body = (e.message + "\n").encode()
            h.send_response(code)
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
            return
        h.send_response(200)
        h.send_header("Content-Type", "application/octet-stream")
        h.send_header("Content-Length", str(size))
        h.end_headers()
        for chunk in self.store.read(digest):
            h.wfile.write(chunk)
