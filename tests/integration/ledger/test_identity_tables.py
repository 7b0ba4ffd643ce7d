"""Migration 0004's tables on SQLite and PostgreSQL: blob ownership and node enrolment."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session
from starforge_api.forgelet.v1 import node_pb2

from common import errors
from control import auth, blob_access, nodes
from control.db import models as m
from control.db.engine import Database

A, B, C = ("a" * 64, "b" * 64, "c" * 64)


def token_id(token: str) -> str:
    found = auth.TOKEN_RE.match(token)
    assert found is not None
    return found.group(2)


def test_blob_owners_are_recorded_once_and_read_per_user(db: Database) -> None:
    db.run_sync(lambda s: blob_access.record(s, "alice", [A, B, A]))
    db.run_sync(lambda s: blob_access.record(s, "alice", [A]))  # a re-upload: no duplicate key
    db.run_sync(lambda s: blob_access.record(s, blob_access.PUBLIC, [C]))
    assert db.run_sync(lambda s: blob_access.readable(s, "alice", [A, B, C])) == {A, B, C}
    assert db.run_sync(lambda s: blob_access.readable(s, "mallory", [A, B, C])) == {C}


def test_owner_rows_of_a_large_upload_in_one_call_keep_the_first_upload_time(db: Database) -> None:
    digests = [f"{i:064x}" for i in range(1200)]  # more rows than one multi-row INSERT had
    db.run_sync(lambda s: blob_access.record(s, "alice", digests[:10]))

    def created(s: Session) -> float:
        row = s.get(m.BlobOwner, (digests[0], "alice"))
        assert row is not None
        return row.created_at

    first = db.run_sync(created)
    db.run_sync(lambda s: blob_access.record(s, "alice", digests + digests[:5]))
    db.run_sync(lambda s: blob_access.record(s, "bob", digests[:3]))
    assert db.run_sync(lambda s: blob_access.readable(s, "alice", digests)) == set(digests)
    assert db.run_sync(lambda s: blob_access.readable(s, "bob", digests)) == set(digests[:3])
    assert db.run_sync(created) == first


def test_a_join_token_is_spent_once_and_replaces_the_nodes_credential(db: Database) -> None:
    db.run_sync(lambda s: auth.create_user(s, "root", admin=True))
    root = auth.Principal(user="root", admin=True, kind="pat", token_id="x")
    n1 = node_pb2.Node(name="n1", fleet="gpu", address="h:1")

    def joining(join_id: str) -> auth.Principal:
        return auth.Principal(user="root", admin=False, kind="join", token_id=join_id, node="n1", fleet="gpu")

    def enrol(s: Session) -> tuple[str, str]:
        token, _ = nodes.create_join_token(s, root, "n1", "gpu", 0)
        node, credential = nodes.register(s, joining(token_id(token)), n1)
        assert node.address == "h:1"
        return token_id(token), credential

    join_id, first = db.run_sync(enrol)
    assert first.startswith("sfn_")
    with pytest.raises(errors.Unauthenticated):
        db.run_sync(lambda s: nodes.register(s, joining(join_id), n1))
    _, second = db.run_sync(enrol)
    revoked = db.run_sync(lambda s: s.get(m.Token, token_id(first)).revoked_at)  # type: ignore[union-attr]
    assert revoked is not None and second != first
