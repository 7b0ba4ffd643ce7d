"""HuggingFace precheck at admission: the model and datasets exist, and gated ones are accessible
with the server's token — before a job waits in a queue for hours only to fail at download.

Speaks the Hub's HTTP API at a configurable endpoint (`hf_endpoint`): GET /api/models/<id> (404:
missing), and for gated repos GET /api/models/<id>/auth-check (403: no access); the same under
/api/datasets/. Answers are cached briefly so a burst of submissions costs one request.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass

import httpx
from starforge_api.control.v1 import error_reason_pb2 as er

from common import errors

HF_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
CACHE_SECONDS = 600.0


@dataclass(frozen=True)
class Repo:
    kind: str  # "model" or "dataset"
    repo_id: str


def looks_like_hub_id(value: str, workspace_paths: set[str]) -> bool:
    """ "org/name" that is not a path in the workspace (a local model directory wins)."""
    if not HF_ID.match(value):
        return False
    prefix = value.rstrip("/") + "/"
    return value not in workspace_paths and not any(p.startswith(prefix) for p in workspace_paths)


class HubChecker:
    def __init__(self, endpoint: str, token: str, timeout: float = 10.0) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._ok: dict[Repo, float] = {}
        self._lock = threading.Lock()

    def _refuse(self, repo: Repo, message: str) -> errors.FailedPrecondition:
        return errors.FailedPrecondition(
            message,
            reason=er.ERROR_REASON_HF_PRECHECK,
            precondition_violations=(
                errors.PreconditionViolation("HF_ACCESS", f"{repo.kind}:{repo.repo_id}", message),
            ),
            metadata={"repo": repo.repo_id, "kind": repo.kind},
        )

    def check(self, repo: Repo) -> None:
        with self._lock:
            if self._ok.get(repo, 0.0) > time.monotonic():
                return
        api = f"{self.endpoint}/api/{repo.kind}s/{repo.repo_id}"
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            with httpx.Client(timeout=self.timeout, headers=headers) as client:
                info = client.get(api)
                if info.status_code in (401, 404):
                    raise self._refuse(
                        repo,
                        f"{repo.kind} {repo.repo_id} was not found on the Hub at {self.endpoint} (or it is private "
                        "and the server's token cannot see it); check the id",
                    )
                if info.status_code != 200:
                    raise errors.Unavailable(
                        f"cannot check {repo.kind} {repo.repo_id} on the Hub: it answered {info.status_code}; try again"
                    )
                gated = info.json().get("gated", False)
                if gated:
                    auth = client.get(f"{api}/auth-check")
                    if auth.status_code in (401, 403):
                        how = "the server has no HF token" if not self.token else "the server's HF token has no access"
                        raise self._refuse(
                            repo,
                            f"{repo.kind} {repo.repo_id} is gated and {how}: request access on its Hub page, "
                            "then ask an admin to use a token that has it",
                        )
                    if auth.status_code != 200:
                        raise errors.Unavailable(
                            f"cannot check access to {repo.kind} {repo.repo_id}: the Hub answered {auth.status_code}"
                        )
        except httpx.HTTPError as e:
            raise errors.Unavailable(
                f"cannot check {repo.kind} {repo.repo_id}: the Hub at {self.endpoint} is unreachable ({e}); try again"
            ) from None
        with self._lock:
            self._ok[repo] = time.monotonic() + CACHE_SECONDS
