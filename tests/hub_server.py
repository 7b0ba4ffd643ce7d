"""A stand-in for the HuggingFace Hub, which is unreachable from here: a real local HTTP server that
speaks the parts of the Hub API StarForge uses (model/dataset info and auth-check).

    GET /api/models/<org>/<name>              200 {"id", "gated", "private"} | 404 {"error"}
    GET /api/models/<org>/<name>/auth-check   200 | 403 (gated, token without access) | 401 (no token)
    (the same under /api/datasets/)
"""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass
class HubRepos:
    public: set[str] = field(default_factory=set)
    # repo id -> tokens that were granted access
    gated: dict[str, set[str]] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)


@contextlib.contextmanager
def hub_server(models: HubRepos, datasets: HubRepos | None = None) -> Iterator[str]:
    """Serve the fake Hub on 127.0.0.1:<free>; yields its base URL."""
    hub_datasets = datasets or HubRepos()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _json(self, code: int, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            parts = self.path.strip("/").split("/")
            if len(parts) < 4 or parts[0] != "api" or parts[1] not in ("models", "datasets"):
                self._json(404, {"error": "Not Found"})
                return
            repos = models if parts[1] == "models" else hub_datasets
            repos.requests.append(self.path)
            repo_id = "/".join(parts[2:4])
            token = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
            known = repo_id in repos.public or repo_id in repos.gated
            if not known:
                self._json(404, {"error": f"Repository Not Found for url: {self.path}"})
                return
            if len(parts) == 5 and parts[4] == "auth-check":
                if repo_id in repos.gated and not token:
                    self._json(401, {"error": "Invalid credentials in Authorization header"})
                elif repo_id in repos.gated and token not in repos.gated[repo_id]:
                    self._json(403, {"error": f"Access to model {repo_id} is restricted."})
                else:
                    self._json(200, {})
                return
            self._json(200, {"id": repo_id, "gated": "manual" if repo_id in repos.gated else False, "private": False})

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
