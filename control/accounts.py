"""Account operations: users and personal access tokens (domain side of AccountService)."""

from __future__ import annotations

import time

from sqlalchemy import select
from sqlalchemy.orm import Session
from starforge_api.control.v1 import account_service_pb2 as pb

from common import errors
from control import auth
from control.db import models as m
from control.ledger.convert import ts

MAX_TTL_SECONDS = 366 * 86400


def user_proto(u: m.User) -> pb.User:
    msg = pb.User(name=u.name, admin=u.admin)
    t = ts(u.created_at)
    if t is not None:
        msg.create_time.CopyFrom(t)
    return msg


def token_proto(t: m.Token) -> pb.TokenInfo:
    msg = pb.TokenInfo(token_id=t.id, user=t.user, name=t.name)
    for field, value in (
        ("create_time", t.created_at),
        ("expire_time", t.expires_at),
        ("revoke_time", t.revoked_at),
        ("last_use_time", t.last_used_at),
    ):
        stamp = ts(value)
        if stamp is not None:
            getattr(msg, field).CopyFrom(stamp)
    return msg


def whoami(s: Session, p: auth.Principal) -> tuple[pb.User, pb.TokenInfo]:
    user = s.get(m.User, p.user)
    token = s.get(m.Token, p.token_id)
    if user is None or token is None:
        raise errors.Unauthenticated("the token's user no longer exists")
    return user_proto(user), token_proto(token)


def create_token(s: Session, p: auth.Principal, user: str, name: str, ttl_seconds: int) -> tuple[str, pb.TokenInfo]:
    who = user or p.user
    if who != p.user and not p.admin:
        raise errors.PermissionDenied("only admins can create tokens for other users")
    if s.get(m.User, who) is None:
        raise errors.NotFound(f"user {who} not found")
    if ttl_seconds < 0 or ttl_seconds > MAX_TTL_SECONDS:
        raise errors.InvalidArgument(f"ttl must be between 0 (no expiry) and {MAX_TTL_SECONDS} seconds")
    if len(name) > 200:
        raise errors.InvalidArgument("token name is longer than 200 characters")
    token, row = auth.issue_token(s, who, "pat", name=name, ttl_seconds=ttl_seconds or None)
    s.flush()
    return token, token_proto(row)


def list_tokens(s: Session, p: auth.Principal, include_inactive: bool) -> list[pb.TokenInfo]:
    now = time.time()
    rows = s.scalars(
        select(m.Token).where(m.Token.user == p.user, m.Token.kind == "pat").order_by(m.Token.created_at.desc())
    )
    return [
        token_proto(t)
        for t in rows
        if include_inactive or (t.revoked_at is None and (t.expires_at is None or t.expires_at > now))
    ]


def revoke_token(s: Session, p: auth.Principal, token_id: str) -> pb.TokenInfo:
    row = s.get(m.Token, token_id)
    if row is None or row.kind != "pat" or (row.user != p.user and not p.admin):
        raise errors.NotFound(f"token {token_id} not found")
    if row.revoked_at is None:
        row.revoked_at = time.time()
    return token_proto(row)


def create_user(s: Session, p: auth.Principal, name: str, admin: bool) -> tuple[pb.User, str]:
    if not p.admin:
        raise errors.PermissionDenied("only admins can create users")
    user = auth.create_user(s, name, admin=admin)
    token, _ = auth.issue_token(s, name, "pat", name="first token")
    return user_proto(user), token


def list_users(s: Session, p: auth.Principal) -> list[pb.User]:
    if not p.admin:
        raise errors.PermissionDenied("only admins can list users")
    return [user_proto(u) for u in s.scalars(select(m.User).order_by(m.User.name))]
