"""Secrets: stored encrypted per user or project, injected into the jobs that name them, masked in logs.

A secret is (scope, holder, name) -> value: scope "user" (holder = the user) or "project" (holder
= "@<user>/<name>", managed by that user or an admin). Values are encrypted with AES-256-GCM under
the console's key (`secrets_key_file`, 32 random bytes the database never holds), with the
secret's (scope, holder, name) as associated data, so a ciphertext copied to another row does not
decrypt. Each row records the id of the key that sealed it, so a console started with the wrong
key says so instead of failing at the first launch, and rows sealed with an old key
(`secrets_old_key_files`) are re-sealed with the current one at start.

Jobs carry references only (JobSpec.secrets). `resolve_secret_env` turns them into values at each
launch; the LaunchRequest stored with the attempt never has them, and every send (the first and
each re-send) resolves them again (`control.launch_secrets`). Log lines of a job are masked at ingest
with that job's values (`MaskCache`).
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import os
import pathlib
import re
import stat
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from starforge_api.control.v1 import error_reason_pb2 as er
from starforge_api.control.v1 import secret_service_pb2 as pb
from starforge_api.executor.v1 import launch_request_pb2 as lr
from starforge_api.job.v1 import job_spec_pb2

from common import errors
from common.config import ConfigError
from control.auth import Principal
from control.db import models as m
from control.ledger.convert import ts

KEY_BYTES = 32
NONCE_BYTES = 12
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
PROJECT_RE = re.compile(r"^@(?P<user>[a-z][a-z0-9-]{1,31})/(?P<name>[A-Za-z0-9][A-Za-z0-9._-]{0,99})$")
MAX_VALUE_BYTES = 64 * 1024
MAX_REFS = 64
# Shorter values are not masked in logs: replacing every "ab" would destroy the log, not a secret.
MIN_MASKED_CHARS = 4
MASK = "***"
USER, PROJECT = "user", "project"
_SCOPE_PB = {USER: pb.SECRET_SCOPE_USER, PROJECT: pb.SECRET_SCOPE_PROJECT}


# -- keys and sealing --------------------------------------------------------------------------


class SecretUnreadable(errors.Internal):
    """A stored secret could not be opened with the console's keys (wrong key, or tampered row)."""


@dataclass(frozen=True)
class SecretKey:
    """One AES-256 key and its public id (stored with each row it seals)."""

    key: bytes
    path: str = ""

    @property
    def key_id(self) -> str:
        # A hash of the key, not the key: tells rows sealed by this key apart, reveals nothing.
        return hashlib.sha256(b"starforge.secret-key-id/v1\0" + self.key).hexdigest()[:16]


def create_key_file(path: pathlib.Path) -> bool:
    """Write 32 random bytes to `path` (mode 0600) unless it exists; True when it was created."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as f:
        f.write(os.urandom(KEY_BYTES))
    return True


def load_key_file(path: pathlib.Path) -> SecretKey:
    """The key in `path`; ConfigError (with the fix) when it is missing, short or readable by others."""
    path = path.expanduser()
    try:
        st = path.stat()
        data = path.read_bytes()
    except OSError as e:
        raise ConfigError(
            f"secrets key file {path}: {e.strerror}; create one with "
            f"`head -c 32 /dev/urandom > {path} && chmod 600 {path}` (every replica needs the same file)"
        ) from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"secrets key file {path} is readable by other users; run `chmod 600 {path}`")
    if len(data) != KEY_BYTES:
        raise ConfigError(f"secrets key file {path} must hold exactly {KEY_BYTES} bytes, it holds {len(data)}")
    return SecretKey(data, str(path))


def _aad(scope: str, holder: str, name: str) -> bytes:
    return f"starforge.secret/v1\0{scope}\0{holder}\0{name}".encode()


@dataclass(frozen=True)
class Keyring:
    """The current key (seals and opens) and old keys (open only, until re-sealed at start)."""

    current: SecretKey | None
    old: tuple[SecretKey, ...] = ()

    @property
    def enabled(self) -> bool:
        return self.current is not None

    def require(self) -> SecretKey:
        if self.current is None:
            raise errors.FailedPrecondition(
                "this console keeps no secrets: it has no secrets_key_file (ask an admin to configure one)",
                reason=er.ERROR_REASON_SECRETS_DISABLED,
            )
        return self.current

    def seal(self, scope: str, holder: str, name: str, value: str) -> tuple[str, bytes]:
        """(key id, nonce + ciphertext) of `value` bound to (scope, holder, name)."""
        key = self.require()
        nonce = os.urandom(NONCE_BYTES)
        return key.key_id, nonce + AESGCM(key.key).encrypt(nonce, value.encode(), _aad(scope, holder, name))

    def open(self, scope: str, holder: str, name: str, key_id: str, blob: bytes) -> str:
        """The value sealed in `blob`; SecretUnreadable when no key of ours opens it for this row."""
        keys = [k for k in (self.current, *self.old) if k is not None and k.key_id == key_id]
        if not keys:
            raise SecretUnreadable(f"secret {name} ({scope} {holder}) was sealed with a key this console does not have")
        try:
            plain = AESGCM(keys[0].key).decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], _aad(scope, holder, name))
            return plain.decode()
        except (InvalidTag, ValueError):
            raise SecretUnreadable(f"secret {name} ({scope} {holder}) does not decrypt: the row was altered") from None


def keyring_from_files(current: pathlib.Path | None, old: Sequence[pathlib.Path] = ()) -> Keyring:
    return Keyring(load_key_file(current) if current else None, tuple(load_key_file(p) for p in old))


def check_at_start(s: Session, keyring: Keyring) -> int:
    """Refuse to start when stored secrets cannot be opened; re-seal rows of old keys with the
    current one. Returns how many rows were re-sealed."""
    ids = {k: n for n, k in s.execute(select(func.count(), m.Secret.key_id).group_by(m.Secret.key_id)).all()}
    if not ids:
        return 0
    total = sum(ids.values())
    if keyring.current is None:
        raise ConfigError(
            f"the database holds {total} secret(s) but the console has no secrets_key_file: "
            "configure the key file they were stored with"
        )
    known = {k.key_id for k in (keyring.current, *keyring.old)}
    unknown = sum(n for k, n in ids.items() if k not in known)
    if unknown:
        raise ConfigError(
            f"{unknown} stored secret(s) were sealed with a key other than "
            f"{keyring.current.path or 'the configured key'}"
            + (" or the old keys" if keyring.old else "")
            + ": configure the key file they were stored with (a previous key goes to secrets_old_key_files)"
        )
    resealed = 0
    for row in s.scalars(select(m.Secret).where(m.Secret.key_id != keyring.current.key_id)):
        value = keyring.open(row.scope, row.holder, row.name, row.key_id, row.ciphertext)
        row.key_id, row.ciphertext = keyring.seal(row.scope, row.holder, row.name, value)
        resealed += 1
    # one row opened end to end: a key file whose id matches but whose bytes were damaged shows here
    first = s.scalars(select(m.Secret).limit(1)).first()
    if first is not None:
        try:
            keyring.open(first.scope, first.holder, first.name, first.key_id, first.ciphertext)
        except SecretUnreadable as e:
            raise ConfigError(f"stored secrets cannot be read: {e.message}") from None
    return resealed


# -- scopes and the SecretService operations ---------------------------------------------------


@dataclass(frozen=True)
class Scope:
    kind: str  # USER or PROJECT
    holder: str  # the user, or "@<user>/<name>"
    owner: str  # the user the secret belongs to (the project's user)


def _bad(field: str, message: str) -> errors.InvalidArgument:
    return errors.InvalidArgument(
        message, reason=er.ERROR_REASON_BAD_SECRET, field_violations=(errors.FieldViolation(field, message),)
    )


def scope_for(p: Principal, project: str) -> Scope:
    """The caller's own scope, or a project's when the caller may manage it (its user, or an admin)."""
    if not project:
        return Scope(USER, p.user, p.user)
    match = PROJECT_RE.match(project)
    if match is None:
        raise _bad("project", f"project {project!r} is not valid: use @<user>/<name> (see starforge.yaml)")
    if match.group("user") != p.user and not p.admin:
        raise errors.PermissionDenied(f"project {project} belongs to @{match.group('user')}; you are @{p.user}")
    return Scope(PROJECT, project, match.group("user"))


def check_name(name: str, field: str = "name") -> None:
    if not NAME_RE.match(name):
        raise _bad(
            field,
            f"secret name {name!r} is not valid: use letters, digits and '_', starting with a letter "
            "or '_' (at most 128), e.g. WANDB_API_KEY",
        )


def check_value(value: str) -> None:
    if not value:
        raise _bad("value", "the secret value is empty: pipe it on stdin or pass --from-file")
    if len(value.encode()) > MAX_VALUE_BYTES:
        raise _bad("value", f"the secret value is longer than {MAX_VALUE_BYTES // 1024} KiB")
    if "\0" in value:
        raise _bad("value", "the secret value contains a NUL byte; environment variables cannot hold one")


def secret_proto(row: m.Secret) -> pb.Secret:
    msg = pb.Secret(
        name=row.name,
        scope=_SCOPE_PB[row.scope],
        owner=row.owner,
        project=row.holder if row.scope == PROJECT else "",
        updated_by=row.updated_by,
    )
    for field, value in (("create_time", row.created_at), ("update_time", row.updated_at)):
        stamp = ts(value)
        if stamp is not None:
            getattr(msg, field).CopyFrom(stamp)
    return msg


def set_secret(
    s: Session, p: Principal, keyring: Keyring, name: str, value: str, project: str
) -> tuple[pb.Secret, bool]:
    keyring.require()
    scope = scope_for(p, project)
    check_name(name)
    check_value(value)
    key_id, blob = keyring.seal(scope.kind, scope.holder, name, value)
    now = time.time()
    row = s.get(m.Secret, (scope.kind, scope.holder, name), with_for_update=True)
    created = row is None
    if row is None:
        row = m.Secret(scope=scope.kind, holder=scope.holder, name=name, owner=scope.owner, created_at=now)
        s.add(row)
    row.key_id, row.ciphertext, row.updated_at, row.updated_by = key_id, blob, now, p.user
    s.flush()
    return secret_proto(row), created


def list_secrets(s: Session, p: Principal, keyring: Keyring, project: str) -> list[pb.Secret]:
    keyring.require()
    scope = scope_for(p, project)
    rows = s.scalars(
        select(m.Secret).where(m.Secret.scope == scope.kind, m.Secret.holder == scope.holder).order_by(m.Secret.name)
    )
    return [secret_proto(r) for r in rows]


def delete_secret(s: Session, p: Principal, keyring: Keyring, name: str, project: str) -> pb.Secret:
    keyring.require()
    scope = scope_for(p, project)
    check_name(name)
    row = s.get(m.Secret, (scope.kind, scope.holder, name), with_for_update=True)
    if row is None:
        where = f"project {scope.holder}" if scope.kind == PROJECT else "you"
        raise errors.NotFound(
            f"secret {name} not found for {where}{_nearest(name, _names(s, [scope]))} (see `sf secret ls`)",
            reason=er.ERROR_REASON_UNKNOWN_SECRET,
        )
    msg = secret_proto(row)
    s.delete(row)
    return msg


# -- job references: admission, resolution at launch --------------------------------------------


def _job_scopes(owner: str, project: str) -> list[Scope]:
    """Where a job's references are looked up, most specific first."""
    return [Scope(PROJECT, project, owner), Scope(USER, owner, owner)]


def _names(s: Session, scopes: Sequence[Scope]) -> set[str]:
    out: set[str] = set()
    for sc in scopes:
        out.update(s.scalars(select(m.Secret.name).where(m.Secret.scope == sc.kind, m.Secret.holder == sc.holder)))
    return out


def _nearest(name: str, names: set[str]) -> str:
    close = difflib.get_close_matches(name, sorted(names), n=3, cutoff=0.5)
    return f"; did you mean {', '.join(close)}?" if close else ""


def env_name(ref: job_spec_pb2.SecretRef) -> str:
    return ref.env or ref.name


def check_refs(s: Session, spec: job_spec_pb2.JobSpec, owner: str) -> None:
    """Admission: references are well formed, set distinct variables outside FORGE_* and --env,
    and name secrets the owner or the project has."""
    if not spec.secrets:
        return
    if len(spec.secrets) > MAX_REFS:
        raise _bad("secrets", f"a job may name at most {MAX_REFS} secrets")
    seen: dict[str, str] = {}
    for i, ref in enumerate(spec.secrets):
        check_name(ref.name, f"secrets[{i}].name")
        env = env_name(ref)
        if not ENV_RE.match(env):
            raise _bad(f"secrets[{i}].env", f"secret {ref.name}: {env!r} is not a valid environment variable name")
        if env.upper().startswith("FORGE_"):
            raise _bad(f"secrets[{i}].env", f"secret {ref.name}: FORGE_* variables belong to the platform")
        if env in seen:
            raise _bad(f"secrets[{i}].env", f"secrets {seen[env]} and {ref.name} both set {env}")
        if env in spec.env:
            raise _bad(f"secrets[{i}].env", f"{env} is set by --env and by secret {ref.name}; drop one")
        seen[env] = ref.name
    available = _names(s, _job_scopes(owner, spec.project))
    for ref in spec.secrets:
        if ref.name not in available:
            raise errors.FailedPrecondition(
                f"secret {ref.name} does not exist for you or project {spec.project}{_nearest(ref.name, available)} "
                f"(create it with `sf secret set {ref.name}`)",
                reason=er.ERROR_REASON_UNKNOWN_SECRET,
                precondition_violations=(errors.PreconditionViolation("SECRET", ref.name, "missing"),),
            )


def _lookup(s: Session, owner: str, project: str, name: str) -> m.Secret | None:
    for sc in _job_scopes(owner, project):
        row = s.get(m.Secret, (sc.kind, sc.holder, name))
        if row is not None:
            return row
    return None


def resolve_secret_env(s: Session, job: m.Job, keyring: Keyring) -> dict[str, str]:
    """{environment variable: value} of the secrets `job` names, read now (each launch).

    FailedPrecondition when a named secret was deleted since submission, or the console lost
    its key: the attempt cannot start.
    """
    spec = job_spec_pb2.JobSpec()
    spec.ParseFromString(job.spec)
    if not spec.secrets:
        return {}
    keyring.require()
    out: dict[str, str] = {}
    for ref in spec.secrets:
        row = _lookup(s, job.owner, job.project, ref.name)
        if row is None:
            raise errors.FailedPrecondition(
                f"secret {ref.name} was deleted after the job was submitted; set it again and rerun",
                reason=er.ERROR_REASON_UNKNOWN_SECRET,
            )
        out[env_name(ref)] = keyring.open(row.scope, row.holder, row.name, row.key_id, row.ciphertext)
    return out


# Names (never values) of the variables holding secrets: the capsule's runner masks their values
# in what it echoes and journals (capsule/runner/masking.py).
MASKED_NAMES_VAR = "FORGE_SECRET_ENV"


def name_secret_env(launch: lr.LaunchRequest, values: dict[str, str]) -> None:
    if values:
        launch.env[MASKED_NAMES_VAR] = ",".join(sorted(values))


# -- masking at ingest ---------------------------------------------------------------------------


def _variants(value: str) -> set[str]:
    """The strings a value shows up as in a log line: itself, each of its lines, base64."""
    out = {value, *value.splitlines()}
    out.add(base64.b64encode(value.encode()).decode().rstrip("="))
    return {v.strip() for v in out if len(v.strip()) >= MIN_MASKED_CHARS}


class Masker:
    """Replaces every occurrence of a set of values with `***`: one compiled alternation (longest
    first), so a line is scanned once whatever the number of values."""

    def __init__(self, values: Sequence[str]) -> None:
        variants = sorted({v for value in values for v in _variants(value)}, key=lambda v: (-len(v), v))
        self._re = re.compile("|".join(re.escape(v) for v in variants)) if variants else None

    def __call__(self, text: str) -> str:
        return self._re.sub(MASK, text) if self._re is not None else text

    @property
    def active(self) -> bool:
        return self._re is not None


class MaskCache:
    """The Masker of each attempt, built from its job's secrets at the attempt's first batch."""

    def __init__(self, keyring: Keyring, size: int = 1024) -> None:
        self.keyring = keyring
        self.size = size
        self._cache: OrderedDict[str, Masker] = OrderedDict()

    def for_attempt(self, s: Session, attempt: m.Attempt) -> Callable[[str], str]:
        return self.for_ids(s, attempt.id, attempt.job_id)

    def for_ids(self, s: Session, attempt_id: str, job_id: str) -> Callable[[str], str]:
        """The masker of attempt `attempt_id` of job `job_id` (built at its first use, then cached)."""
        masker = self._cache.get(attempt_id)
        if masker is None:
            masker = Masker(self._values(s, job_id))
            self._cache[attempt_id] = masker
            while len(self._cache) > self.size:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(attempt_id)
        return masker

    def _values(self, s: Session, job_id: str) -> list[str]:
        job = s.get(m.Job, job_id)
        if job is None or not self.keyring.enabled:
            return []
        spec = job_spec_pb2.JobSpec()
        spec.ParseFromString(job.spec)
        values = []
        for ref in spec.secrets:
            row = _lookup(s, job.owner, job.project, ref.name)
            if row is not None:
                try:
                    values.append(self.keyring.open(row.scope, row.holder, row.name, row.key_id, row.ciphertext))
                except SecretUnreadable:
                    continue
        return values
