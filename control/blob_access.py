"""Who may read a blob, or learn that it exists: blob access follows ownership.

The blob store is content-addressed and shared, so a digest alone must not be a capability. A
personal access token may read (ReadBlob, HTTP GET) and see as present (FindMissingBlobs) only
the blobs its user uploaded (`blob_owners`, recorded by UploadBlobs even when the content was
already there) and the blobs of published datasets (recorded under `PUBLIC` when a dataset is
pushed: datasets are readable by every user). For anything else FindMissingBlobs answers
"missing", and the re-upload that follows records the caller as an owner: with a
content-addressed store it costs bytes, never integrity.

Job workspaces and dataset manifests may reference only blobs their submitter may read
(`require_readable`, answered like a missing upload), so a job or dataset never becomes a way to
read someone else's blob. A workspace named by its manifest digest (SubmitJob's
`workspace_digest`) is one whose manifest blob the submitter owns (the console records them as
its owner when it admits the manifest; uploading the same text gives nothing more), and its
files pass the same check. Run tokens read what their attempt needs (`RunBlobCheck`); admins and
executor tokens read everything.

Owner rows are only ever added, never deleted: what a user could read stays readable, which
control/workspace_records.py relies on (a workspace a user was admitted with is not asked about
again). Code that deletes owner rows must clear those records too.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session
from starforge_api.control.v1 import error_reason_pb2 as er

from common import errors
from control.auth import Principal
from control.db import models as m
from control.db.engine import Database, insert_rows

# The owner recorded for blobs of published datasets (no user name contains '*').
PUBLIC = "*"
# Digests per query (PostgreSQL and SQLite limit bound parameters).
BATCH = 500

# True when `digest` belongs to attempt `attempt_id` (its workspace, capsule or datasets).
RunBlobCheck = Callable[[str, str], Awaitable[bool]]


def _batches(digests: Iterable[str]) -> Iterable[list[str]]:
    items = sorted(set(digests))
    for i in range(0, len(items), BATCH):
        yield items[i : i + BATCH]


def record(s: Session, user: str, digests: Iterable[str]) -> None:
    """Record `user` as an owner of each digest (idempotent; concurrent uploads are fine).

    One DBAPI executemany of plain tuples (`ON CONFLICT DO NOTHING`, on SQLite and PostgreSQL
    alike): a first upload of a 10,000-file lab records 10,000 rows, and building them as an ORM
    multi-row INSERT cost more CPU than the database's work (profile of bench `packaging`).
    """
    now = time.time()
    rows = [(d, user, now) for d in sorted(set(digests))]
    insert_rows(s, m.BlobOwner.__tablename__, ("digest", "user", "created_at"), rows, conflict=("digest", "user"))


def readable(s: Session, user: str, digests: Iterable[str]) -> set[str]:
    """Which of `digests` the user may read (theirs or published in a dataset)."""
    out: set[str] = set()
    for batch in _batches(digests):
        out.update(
            s.scalars(
                select(m.BlobOwner.digest).where(m.BlobOwner.digest.in_(batch), m.BlobOwner.user.in_((user, PUBLIC)))
            )
        )
    return out


def require_readable(s: Session, p: Principal, digests: Iterable[str], what: str, *, also: str = "") -> bool:
    """Refuse a workspace or dataset that references blobs its submitter may not read.

    The refusal is the one a never-uploaded file gets (MISSING_BLOB): `sf` uploads them again,
    which records the submitter as an owner. `also`, when given, is one more digest asked about in
    the same query without being required; returns whether the submitter may read it."""
    wanted = set(digests)
    if p.admin or not wanted:
        return bool(also) and also in readable(s, p.user, [also])
    found = readable(s, p.user, wanted | ({also} if also else set()))
    missing = sorted(wanted - found)
    if missing:
        raise errors.FailedPrecondition(
            f"{len(missing)} {what} file(s) were not uploaded (first: {missing[0][:12]}); submit again with sf",
            reason=er.ERROR_REASON_MISSING_BLOB,
            precondition_violations=tuple(errors.PreconditionViolation("BLOB", d, "missing") for d in missing[:20]),
        )
    return bool(also) and also in found


class BlobAccess:
    """The read rules of the module docstring, for BlobService and the HTTP port."""

    def __init__(self, db: Database, run_check: RunBlobCheck) -> None:
        self.db = db
        self.run_check = run_check

    async def may_read(self, p: Principal, digest: str) -> bool:
        if p.admin or p.kind == "executor":
            return True
        if p.kind == "run":
            return bool(p.attempt_id) and await self.run_check(p.attempt_id or "", digest)
        if p.kind == "pat":
            return digest in await self.db.run(lambda s: readable(s, p.user, [digest]))
        return False

    async def hidden(self, p: Principal, present: list[str]) -> set[str]:
        """Of the `present` digests, those the caller must be told are missing."""
        if p.admin or p.kind == "executor" or not present:
            return set()
        return set(present) - await self.db.run(lambda s: readable(s, p.user, present))

    async def record_uploads(self, p: Principal, digests: set[str]) -> None:
        if digests:
            await self.db.run(lambda s: record(s, p.user, digests))
