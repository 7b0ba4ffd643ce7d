"""Accounts and tokens: who the caller is, and which token kinds may call what.

Token kinds (`sf<k>_<id>_<secret>`):

- `sfp_` personal access token (pat): a user; admin rights when the user is an admin.
- `sfr_` run token: one job's capsule (ingest, its own blobs).
- `sfj_` join token: single use, expiring, bound to one node name and fleet; RegisterNode
  exchanges it for a node credential (control/nodes.py).
- `sfn_` node credential: one forgelet, bound to its node name and fleet.
- `sfe_` executor token: an agent executor, bound to the fleet whose nodes it may list.

Only sha256(secret) is stored: tokens are 256-bit random, so a slow hash adds nothing. A
verified token is cached for `CACHE_SECONDS`, so a revocation takes effect within that time.
A run token this process issues is cached as soon as the transaction that made it commits
(`TokenVerifier`): the runner's first call, seconds later, then reads nothing from the ledger.
Only a personal access token carries its user's admin rights: a node or executor token minted by
an admin is not an admin.

`interceptor()` plugs the token database into the shared `common.authn` interceptor: the
caller is resolved and its token kind checked against `POLICY` before the request is read, and
exposed as `current()` to the servicer.
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass

from sqlalchemy import Table, and_, bindparam, event, inspect, or_, update
from sqlalchemy.orm import Session
from starforge_api.control.v1 import error_reason_pb2

from common import authn, errors
from control.db import models as m
from control.db.engine import Database

CACHE_SECONDS = 10.0
# session.info: the run tokens issued in the session's transaction, (token, row), for TokenVerifier
ISSUED_RUN_TOKENS = "starforge.issued_run_tokens"
RUN_TOKEN_GRACE_SECONDS = 600.0
USER_RE = re.compile(r"^[a-z][a-z0-9-]{1,31}$")
TOKEN_RE = re.compile(r"^sf([prnje])_([0-9a-z]{10})_([A-Za-z0-9_-]{20,})$")
KIND_PREFIX = {"pat": "p", "run": "r", "node": "n", "join": "j", "executor": "e"}
KIND_NAMES = {
    "pat": "personal access token",
    "run": "run token",
    "node": "node credential",
    "join": "node join token",
    "executor": "executor token",
}
# Kinds bound to a node name and/or fleet (models.TokenBinding).
BOUND_KINDS = frozenset({"node", "join", "executor"})


@dataclass(frozen=True)
class Principal:
    """The authenticated caller."""

    user: str
    admin: bool
    kind: str  # "pat", "run", "node", "join" or "executor"
    token_id: str
    job_id: str | None = None  # run tokens: the job of their attempt
    attempt_id: str | None = None  # run tokens: the one attempt they may report for and read
    node: str = ""  # node and join tokens: the node name they act as
    fleet: str = ""  # node, join and executor tokens: their fleet

    def can_see(self, owner: str) -> bool:
        return self.admin or self.user == owner


_current: contextvars.ContextVar[Principal | None] = contextvars.ContextVar("principal", default=None)


def current() -> Principal:
    """The caller of the RPC being served (set by the interceptor)."""
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
    token, row = issue_token(s, owner, "run", name=f"run {attempt_id}", job_id=job_id, attempt_id=attempt_id)
    s.info.setdefault(ISSUED_RUN_TOKENS, []).append((token, row))
    return token


_TOKENS = m.Token.__table__
assert isinstance(_TOKENS, Table)
_EXPIRE_RUN_TOKENS = (
    update(_TOKENS)
    .where(
        _TOKENS.c.kind == "run",
        or_(
            _TOKENS.c.attempt_id == bindparam("run_attempt"),
            # issued by a replica of the previous release (rolling upgrade): scoped by name only
            and_(_TOKENS.c.attempt_id.is_(None), _TOKENS.c.name == bindparam("run_name")),
        ),
        or_(_TOKENS.c.expires_at.is_(None), _TOKENS.c.expires_at > bindparam("deadline")),
    )
    .values(expires_at=bindparam("deadline"))
)


def expire_run_tokens(s: Session, attempt_id: str, grace_seconds: float = RUN_TOKEN_GRACE_SECONDS) -> None:
    """An attempt's run tokens expire when it ends, after a grace period for the capsule to drain
    its journal (logs and metrics; ingest refuses records that would change the outcome of an
    ended attempt, see telemetry.ingest)."""
    deadline = time.time() + grace_seconds
    # One statement on the transaction's connection: the session's pending changes (the attempt's
    # and the job's ends) are not flushed for it, and no token row is loaded. The verifier reads
    # tokens in sessions of its own; a token this very session made or changed and has not
    # written yet (none of the callers does today) is written first, so the statement covers it.
    if any(isinstance(o, m.Token) for o in s.new) or any(isinstance(o, m.Token) for o in s.dirty):
        s.flush()
    s.connection().execute(
        _EXPIRE_RUN_TOKENS, {"run_attempt": attempt_id, "run_name": f"run {attempt_id}", "deadline": deadline}
    )
    # The UPDATE leaves the session's rows as they were: a token issued in this same transaction
    # is not cached at commit with the expiry it no longer has; its first use looks it up.
    issued = s.info.get(ISSUED_RUN_TOKENS)
    if issued:
        issued[:] = [(token, row) for token, row in issued if run_token_attempt(row) != attempt_id]


def run_token_attempt(row: m.Token) -> str | None:
    """The attempt a run token may report for. A replica of the previous release (during a rolling
    upgrade) issues run tokens without `attempt_id`, named "run <attempt id>" as ours are: they are
    scoped by that name, as migration 0005 scoped the ones issued before it."""
    if row.attempt_id is None and row.kind == "run" and row.name.startswith("run "):
        return row.name.removeprefix("run ")
    return row.attempt_id


def _usable(row: m.Token) -> bool:
    return row.revoked_at is None and (row.expires_at is None or row.expires_at > time.time())


class TokenVerifier:
    """Verifies tokens against the database, with a short cache.

    A run token issued through `db` (`issue_run_token`, at dispatch) is put in the cache when the
    transaction that made it commits, as its first lookup would have found it: the runner's first
    call, seconds later, reads nothing. A token whose transaction rolled back, or whose row was
    undone by a savepoint, is not: it was never stored."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._cache: dict[str, tuple[Principal, float, float | None]] = {}
        event.listen(db.sessions, "after_commit", self._take_issued)
        event.listen(db.sessions, "after_rollback", _drop_issued)

    def forget(self) -> None:
        self._cache.clear()

    def _take_issued(self, session: Session) -> None:
        """On the database thread, as a transaction commits: cache the run tokens it issued."""
        for token, row in session.info.pop(ISSUED_RUN_TOKENS, ()):
            if not inspect(row).persistent:  # undone (a rolled-back savepoint's note is dropped anyway)
                continue
            principal = Principal(
                user=row.user,
                admin=False,  # only a personal access token carries its user's admin rights
                kind=row.kind,
                token_id=row.id,
                job_id=row.job_id,
                attempt_id=run_token_attempt(row),
            )
            self._remember(token, principal, row.expires_at, time.monotonic())

    def _remember(self, token: str, principal: Principal, expires_at: float | None, since: float) -> None:
        """Cache `principal` for `token` for CACHE_SECONDS from `since` (monotonic) and no longer
        than the token's own expiry."""
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[token] = (principal, since + CACHE_SECONDS, expires_at)

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
            if row.kind == "join" and not _usable(row):
                raise errors.Unauthenticated(
                    f"the join token {token_id} was already used or has expired; "
                    "mint a new one with `sf admin node join-token`",
                    reason=error_reason_pb2.ERROR_REASON_JOIN_TOKEN_USED,
                )
            if row.revoked_at is not None:
                raise errors.Unauthenticated(f"the token {token_id} was revoked; create a new one")
            if row.expires_at is not None and row.expires_at <= time.time():
                raise errors.Unauthenticated(f"the token {token_id} has expired; create a new one")
            user = s.get(m.User, row.user)
            if user is None:
                raise errors.Unauthenticated("the token's user no longer exists")
            if row.last_used_at is None or row.last_used_at < time.time() - 60:
                row.last_used_at = time.time()
            binding = s.get(m.TokenBinding, row.id) if row.kind in BOUND_KINDS else None
            principal = Principal(
                user=user.name,
                admin=user.admin and row.kind == "pat",
                kind=row.kind,
                token_id=row.id,
                job_id=row.job_id,
                attempt_id=run_token_attempt(row),
                node=binding.node if binding is not None else "",
                fleet=binding.fleet if binding is not None else "",
            )
            return principal, row.expires_at

        principal, expires_at = await self.db.run(lookup)
        self._remember(token, principal, expires_at, now)
        return principal


def _drop_issued(session: Session) -> None:
    """A transaction or a savepoint rolled back: the run tokens noted so far are not cached. Those
    it made were never stored; any made before a savepoint are looked up on their first use."""
    session.info.pop(ISSUED_RUN_TOKENS, None)


# Which token kinds may call which method (by full method name prefix; the first match wins).
# Anything not under /starforge. is public (health, reflection). Finer rules (admins only, a node
# acting on its own name, an executor on its own fleet) are checked by the domain code.
POLICY: list[tuple[str, frozenset[str]]] = [
    ("/starforge.ingest.v1.IngestService/", frozenset({"run"})),
    ("/starforge.control.v1.BlobService/ReadBlob", frozenset({"pat", "run", "executor"})),
    ("/starforge.forgelet.v1.NodeRegistryService/RegisterNode", frozenset({"node", "join"})),
    ("/starforge.forgelet.v1.NodeRegistryService/Heartbeat", frozenset({"node"})),
    ("/starforge.forgelet.v1.NodeRegistryService/ListNodes", frozenset({"pat", "executor", "node"})),
    ("/starforge.forgelet.v1.NodeRegistryService/DrainNode", frozenset({"pat", "node"})),
    ("/starforge.forgelet.v1.NodeRegistryService/UndrainNode", frozenset({"pat", "node"})),
    ("/starforge.control.v1.SecretService/", frozenset({"pat"})),  # never a job's run token
    ("/starforge.", frozenset({"pat"})),
]

MIB = 1024 * 1024
# Methods whose messages may exceed common.authn.DEFAULT_RECEIVE_BYTES (a job's or dataset's file
# manifest: about 120 bytes a file; FindMissingBlobs: up to 100,000 digests).
RECEIVE_LIMITS = {
    "/starforge.control.v1.ControlService/SubmitJob": 32 * MIB,
    "/starforge.control.v1.DatasetService/PushDataset": 32 * MIB,
    "/starforge.control.v1.BlobService/FindMissingBlobs": 8 * MIB,
}


def _allowed(method: str) -> frozenset[str] | None:
    for prefix, kinds in POLICY:
        if method.startswith(prefix):
            return kinds
    return None


def _article(noun: str) -> str:
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


def check_kind(principal: Principal, method: str, kinds: frozenset[str]) -> Principal:
    """The principal, if its token kind may call `method`; PERMISSION_DENIED (TOKEN_SCOPE) otherwise."""
    if principal.kind not in kinds:
        needs = " or ".join(_article(KIND_NAMES[k]) for k in sorted(kinds))
        raise errors.PermissionDenied(
            f"{_article(KIND_NAMES[principal.kind])} cannot call {method.rsplit('/', 1)[-1]} (it needs {needs})",
            reason=error_reason_pb2.ERROR_REASON_TOKEN_SCOPE,
        )
    return principal


def bind(principal: Principal) -> None:
    """Make `principal` the caller of the code that runs in this context (`current`)."""
    _current.set(principal)


def resolver(verifier: TokenVerifier) -> authn.Resolve:
    """(method, token) -> the caller, if its token may call `method` (POLICY); raises otherwise."""

    async def resolve(method: str, token: str | None) -> Principal:
        kinds = _allowed(method)
        assert kinds is not None  # only protected methods are resolved
        return check_kind(await verifier.verify(token), method, kinds)

    return resolve


def interceptor(verifier: TokenVerifier) -> authn.AuthnInterceptor:
    """The control plane's interceptor: the shared one, resolving tokens from the database."""
    return authn.AuthnInterceptor(
        resolver(verifier),
        protects=lambda method: _allowed(method) is not None,
        bind=bind,
        limits=RECEIVE_LIMITS,
    )
