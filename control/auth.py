"""Accounts and tokens: personal access tokens, per-run tokens, node tokens; who may call what.

Tokens look like `sfp_<id>_<secret>` (personal), `sfr_<id>_<secret>` (run) and `sfn_<id>_<secret>`
(node). Only sha256(secret) is stored: tokens are 256-bit random, so a slow hash adds nothing. A
verified token is cached for `CACHE_SECONDS`, so a revocation takes effect within that time.

`AuthInterceptor` authenticates every call before its handler runs, checks the token kind against
the method's policy, and exposes the caller as `current()` to the servicer.
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from sqlalchemy import select
from sqlalchemy.orm import Session
from starforge.control.v1 import error_reason_pb2

from common import errors
from common.channel import token_from_metadata
from control.db import models as m
from control.db.engine import Database

CACHE_SECONDS = 10.0
RUN_TOKEN_GRACE_SECONDS = 600.0
USER_RE = re.compile(r"^[a-z][a-z0-9-]{1,31}$")
TOKEN_RE = re.compile(r"^sf([prn])_([0-9a-z]{10})_([A-Za-z0-9_-]{20,})$")
KIND_PREFIX = {"pat": "p", "run": "r", "node": "n"}
KIND_NAMES = {"pat": "personal access token", "run": "run token", "node": "node token"}


@dataclass(frozen=True)
class Principal:
    """The authenticated caller."""

    user: str
    admin: bool
    kind: str  # "pat", "run" or "node"
    token_id: str
    job_id: str | None = None  # run tokens: the job of their attempt
    attempt_id: str | None = None  # run tokens: the one attempt they may report for and read

    def can_see(self, owner: str) -> bool:
        return self.admin or self.user == owner


_current: contextvars.ContextVar[Principal | None] = contextvars.ContextVar("principal", default=None)


def current() -> Principal:
    """The caller of the RPC being served (set by AuthInterceptor)."""
    p = _current.get()
    if p is None:
        raise errors.Unauthenticated("this call needs a token")
    return p


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_token(kind: str) -> tuple[str, str, str]:
    """(full token, id, secret hash) for a new token of `kind`."""
    token_id = "".join(secrets.choice("0123456789abcdefghjkmnpqrstvwxyz") for _ in range(10))
    secret = secrets.token_urlsafe(32)
    return f"sf{KIND_PREFIX[kind]}_{token_id}_{secret}", token_id, _hash(secret)


def create_user(s: Session, name: str, *, admin: bool = False) -> m.User:
    if not USER_RE.match(name):
        raise errors.InvalidArgument(
            f"user name {name!r} is not valid: use 2-32 characters a-z, 0-9 and '-', starting with a letter",
            field_violations=(errors.FieldViolation("name", "must match [a-z][a-z0-9-]{1,31}"),),
        )
    if s.get(m.User, name) is not None:
        raise errors.AlreadyExists(f"user {name} already exists")
    user = m.User(name=name, admin=admin, created_at=time.time())
    s.add(user)
    return user


def issue_token(
    s: Session,
    user: str,
    kind: str,
    *,
    name: str = "",
    ttl_seconds: float | None = None,
    job_id: str | None = None,
    attempt_id: str | None = None,
) -> tuple[str, m.Token]:
    """Create a token; returns (secret token, row). The secret is not stored."""
    token, token_id, secret_hash = new_token(kind)
    now = time.time()
    row = m.Token(
        id=token_id,
        user=user,
        name=name,
        secret_hash=secret_hash,
        kind=kind,
        job_id=job_id,
        attempt_id=attempt_id,
        created_at=now,
        expires_at=now + ttl_seconds if ttl_seconds else None,
    )
    s.add(row)
    return token, row


def issue_run_token(s: Session, owner: str, job_id: str, attempt_id: str) -> str:
    """A new run token for one attempt (the secret; only its hash is stored).

    Every launch of an attempt gets its own token (a re-sent launch a fresh one): tokens are never
    kept in plain text, so a resend cannot reuse the first one."""
    token, _ = issue_token(s, owner, "run", name=f"run {attempt_id}", job_id=job_id, attempt_id=attempt_id)
    return token


def expire_run_tokens(s: Session, attempt_id: str, grace_seconds: float = RUN_TOKEN_GRACE_SECONDS) -> None:
    """An attempt's run tokens expire when it ends, after a grace period for the capsule to drain
    its journal (logs and metrics; ingest refuses records that would change the outcome of an
    ended attempt, see telemetry.ingest)."""
    deadline = time.time() + grace_seconds
    for row in s.scalars(select(m.Token).where(m.Token.attempt_id == attempt_id, m.Token.kind == "run")):
        if row.expires_at is None or row.expires_at > deadline:
            row.expires_at = deadline


class TokenVerifier:
    """Verifies tokens against the database, with a short cache."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._cache: dict[str, tuple[Principal, float, float | None]] = {}

    def forget(self) -> None:
        self._cache.clear()

    async def verify(self, token: str | None) -> Principal:
        if not token:
            raise errors.Unauthenticated(
                "no token: run `sf login` (or set STARFORGE_TOKEN) with a personal access token"
            )
        now = time.monotonic()
        hit = self._cache.get(token)
        if hit is not None and hit[1] > now and (hit[2] is None or hit[2] > time.time()):
            return hit[0]
        match = TOKEN_RE.match(token)
        if match is None:
            raise errors.Unauthenticated("the token is malformed; check STARFORGE_TOKEN or run `sf login`")
        token_id, secret = match.group(2), match.group(3)

        def lookup(s: Session) -> tuple[Principal, float | None]:
            row = s.get(m.Token, token_id)
            if row is None or not hmac.compare_digest(row.secret_hash, _hash(secret)):
                raise errors.Unauthenticated("the token is not valid; run `sf login` with a current token")
            if row.revoked_at is not None:
                raise errors.Unauthenticated(f"the token {token_id} was revoked; create a new one")
            if row.expires_at is not None and row.expires_at <= time.time():
                raise errors.Unauthenticated(f"the token {token_id} has expired; create a new one")
            user = s.get(m.User, row.user)
            if user is None:
                raise errors.Unauthenticated("the token's user no longer exists")
            if row.last_used_at is None or row.last_used_at < time.time() - 60:
                row.last_used_at = time.time()
            return (
                Principal(
                    user=user.name,
                    admin=user.admin,
                    kind=row.kind,
                    token_id=row.id,
                    job_id=row.job_id,
                    attempt_id=row.attempt_id,
                ),
                row.expires_at,
            )

        principal, expires_at = await self.db.run(lookup)
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[token] = (principal, now + CACHE_SECONDS, expires_at)
        return principal


# Which token kinds may call which method (by full method name prefix). Anything not listed under
# /starforge. is public (health, reflection).
POLICY: list[tuple[str, frozenset[str]]] = [
    ("/starforge.ingest.v1.IngestService/", frozenset({"run"})),
    ("/starforge.control.v1.BlobService/ReadBlob", frozenset({"pat", "run"})),
    ("/starforge.forgelet.v1.NodeRegistryService/", frozenset({"node", "pat"})),
    ("/starforge.control.v1.SecretService/", frozenset({"pat"})),  # never a job's run token
    ("/starforge.", frozenset({"pat"})),
]

Handler = Callable[..., Any]


def _allowed(method: str) -> frozenset[str] | None:
    for prefix, kinds in POLICY:
        if method.startswith(prefix):
            return kinds
    return None


class AuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Authenticates every StarForge call and sets `current()` for its handler."""

    def __init__(self, verifier: TokenVerifier) -> None:
        self.verifier = verifier

    async def _principal(self, method: str, context: Any, kinds: frozenset[str]) -> Principal:
        principal = await self.verifier.verify(token_from_metadata(context.invocation_metadata()))
        if principal.kind not in kinds:
            needs = " or ".join(KIND_NAMES[k] for k in sorted(kinds))
            raise errors.PermissionDenied(
                f"a {KIND_NAMES[principal.kind]} cannot call {method.rsplit('/', 1)[-1]} (it needs a {needs})",
                reason=error_reason_pb2.ERROR_REASON_TOKEN_SCOPE,
            )
        return principal

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
        details: grpc.HandlerCallDetails,
    ) -> Any:
        handler = await continuation(details)
        method = details.method
        kinds = _allowed(method)
        if handler is None or kinds is None:
            return handler
        outer = self

        def unary(behavior: Handler) -> Handler:
            async def wrapper(request: Any, context: Any) -> Any:
                _current.set(await outer._principal(method, context, kinds))
                return await behavior(request, context)

            return wrapper

        def stream(behavior: Handler) -> Handler:
            async def wrapper(request: Any, context: Any) -> AsyncIterator[Any]:
                _current.set(await outer._principal(method, context, kinds))
                async for item in behavior(request, context):
                    yield item

            return wrapper

        kw = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(unary(handler.unary_unary), **kw)
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(stream(handler.unary_stream), **kw)
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(unary(handler.stream_unary), **kw)
        if handler.stream_stream:
            return grpc.stream_stream_rpc_method_handler(stream(handler.stream_stream), **kw)
        return handler
