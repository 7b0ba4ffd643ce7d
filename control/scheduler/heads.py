"""Each owner's head of line, held in memory between two reads of the whole queue.

A full read (`HeadCache.load`, the scheduler's full pass) takes each owner's first `per_owner`
dispatchable QUEUED jobs in their own order (priority desc, then seq) from the ledger, one index
range per owner. Between two full reads, `refresh` brings the copy up to date by reading only
what changed since the last cycle:

- jobs admitted since: `seq` above the last one seen, up to the `job_seq` counter read first
  (the counter is row-locked until its transaction commits, so every seq up to the value read is
  committed and visible);
- QUEUED jobs whose `not_before` (retry backoff) passed since the last cycle;
- jobs this process's committed transactions moved into or out of QUEUED, or released
  (control/db/changes.py), and the jobs this scheduler placed: their rows are read again by id.

A change made by another replica (a job it claimed, stopped or queued again) is not seen until
the next full read (every STATUS_REFRESH_SECONDS with a big queue). That is harmless: a claim
re-checks the job under a row lock (`FOR UPDATE SKIP LOCKED` on PostgreSQL, the conditional read in
SQLite's single writer), so a stale head is never launched, only dropped and replaced.

What is held: per owner, a prefix of its queue in dispatch order. An owner with more jobs in the
ledger than were held has a frontier (`_partial`: the order key of the last job read): the copy
holds exactly its jobs up to the frontier, a job that sorts after it is left out (not next), and
an owner whose jobs up to the frontier are all gone is read again. `fill` reads again every such
owner that lost held jobs, so that the copy is what a full read would find (the scheduler's full
passes between two full reads decide on it).

The heads (each owner's first job) are also kept sorted by (priority desc, seq) in an index that
changes only for owners whose held jobs changed: the fast pass's fair order walks it and keys only
the owners with usage (placement.fair_order_of_heads), instead of keying every owner each cycle.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.orm import Session

from control.db import engine
from control.db.changes import ChangeFeed, Subscription
from control.ledger import state_machine as sm
from control.scheduler import placement

COLUMNS = "id, owner, project, priority, seq, needs, eligible_fleets"

# Each owner's first `per_owner` dispatchable jobs, through ix_jobs_state_owner_order: a recursive
# CTE walks the distinct owners of QUEUED jobs one index seek at a time (a "loose index scan"),
# then each owner's head of line is an index range read. SQLite runs the head of line as an `IN`
# subquery per owner. PostgreSQL planned that as a filter over a scan of the whole table (the
# subquery once per QUEUED job: 0.2 s at 7,000 queued, and past the planner's JIT threshold,
# another 0.4 s compiling, at every cycle); it gets the same range read as a LATERAL join, which
# SQLite lacks.
_OWNERS = """
    WITH RECURSIVE owners(owner) AS (
        SELECT (SELECT min(owner) FROM jobs WHERE state = :queued)
        UNION ALL
        SELECT (SELECT min(j.owner) FROM jobs j WHERE j.state = :queued AND j.owner > o.owner)
        FROM owners o WHERE o.owner IS NOT NULL
    )"""
_HEAD_OF_LINE = """
        WHERE q.state = :queued AND q.owner = owners.owner AND q.not_before <= :now
        ORDER BY q.priority DESC, q.seq
        LIMIT :per_owner"""
_C = ", ".join("c." + c for c in COLUMNS.split(", "))
_Q = ", ".join("q." + c for c in COLUMNS.split(", "))
CANDIDATES = {
    "sqlite": text(
        f"""{_OWNERS}
    SELECT {_C}
    FROM owners JOIN jobs c ON c.id IN (SELECT q.id FROM jobs q {_HEAD_OF_LINE})
    WHERE owners.owner IS NOT NULL"""  # noqa: S608 (constant column names)
    ),
    "postgresql": text(
        f"""{_OWNERS}
    SELECT {_C}
    FROM owners CROSS JOIN LATERAL (SELECT {_Q} FROM jobs q {_HEAD_OF_LINE}) c
    WHERE owners.owner IS NOT NULL"""  # noqa: S608 (constant column names)
    ),
}
_OWNER = text(
    f"SELECT {COLUMNS} FROM jobs WHERE state = :queued AND owner = :owner AND not_before <= :now "  # noqa: S608
    "ORDER BY priority DESC, seq LIMIT :per_owner"
)
_SEQ_MARK = "SELECT value FROM counters WHERE name = 'job_seq'"  # (engine.read_rows, as _DUE)
# Jobs admitted since the last read, whatever their state now (filtered here: a state term would
# lead SQLite, which has no statistics, to scan every QUEUED row through ix_jobs_state_queue).
_ADMITTED = text(f"SELECT {COLUMNS}, state, not_before FROM jobs WHERE seq > :lo AND seq <= :hi")  # noqa: S608
# QUEUED jobs whose backoff ended, through the partial index ix_jobs_queued_backoff (its terms are
# literal: state = 1, QUEUED, and not_before > 0); SQLite is told the index, it would pick another.
assert sm.QUEUED == 1
_DUE_WHERE = "WHERE state = 1 AND not_before > 0 AND not_before > ? AND not_before <= ?"
_DUE = {
    "sqlite": f"SELECT {COLUMNS} FROM jobs INDEXED BY ix_jobs_queued_backoff {_DUE_WHERE}",  # noqa: S608
    "postgresql": f"SELECT {COLUMNS} FROM jobs {_DUE_WHERE}",  # noqa: S608
}
_BY_ID = text(
    f"SELECT {COLUMNS}, state, not_before FROM jobs WHERE id IN :ids"  # noqa: S608
).bindparams(bindparam("ids", expanding=True))
ID_CHUNK = 10_000  # ids per IN list (PostgreSQL takes at most 65,535 parameters)


class _Parser:
    """Candidates from rows; the JSON columns repeat across jobs, so each distinct text is parsed once
    (and its parsed value shared by every candidate that has it)."""

    def __init__(self) -> None:
        self._needs: dict[str, tuple[dict[str, int], dict[str, int]]] = {}
        self._fleets: dict[str, tuple[str, ...]] = {}

    def candidate(self, row: Sequence[Any]) -> placement.Candidate:
        job_id, owner, project, priority, seq, needs, eligible = row[:7]
        needs = needs or "{}"
        n = self._needs.get(needs)
        if n is None:
            doc = json.loads(needs)
            n = self._needs[needs] = (dict(doc.get("gpus", {})), dict(doc.get("nodes", {})))
        eligible = eligible or "[]"
        fleets = self._fleets.get(eligible)
        if fleets is None:
            fleets = self._fleets[eligible] = tuple(json.loads(eligible))
        return placement.Candidate(
            job_id=job_id,
            owner=owner,
            project=project,
            priority=priority,
            seq=seq,
            needs=n[0],
            nodes=n[1],
            fleets=fleets,
        )

    def trim(self) -> None:
        if len(self._needs) + len(self._fleets) > 10_000:  # free-form values: never grow without bound
            self._needs.clear()
            self._fleets.clear()


def _order(c: placement.Candidate) -> tuple[int, int]:
    return (-c.priority, c.seq)


class HeadCache:
    def __init__(self, feed: ChangeFeed | None, per_owner: int) -> None:
        self.per_owner = per_owner
        self._feed = feed
        self._changes: Subscription | None = None
        self._parser = _Parser()
        self._queues: dict[str, list[placement.Candidate]] = {}
        self._partial: dict[str, tuple[int, int]] = {}  # owner -> frontier (order key of the last job read)
        self._owner_of: dict[str, str] = {}  # job id -> owner, for every job held
        self._seq_mark = 0  # every job with seq <= this was seen by a read
        self._due_mark = 0.0  # every job with not_before <= this was seen by a read
        self._recheck: set[str] = set()  # ids to read again on the next refresh
        # Every owner's head (its first job) as (-priority, seq, owner), sorted: the fair order of
        # the fast pass starts from it (placement.fair_order_of_heads). `_dirty`: owners whose held
        # jobs changed since it was last brought up to date; `_short`: owners with a frontier that
        # lost held jobs since they were read (a full pass from memory reads them again).
        self._index: list[tuple[int, int, str]] = []
        self._indexed: dict[str, tuple[int, int, str]] = {}
        self._head: dict[str, placement.Candidate] = {}  # owner -> its first job held
        self._dirty: set[str] = set()
        self._short: set[str] = set()
        # a full read was made and nothing was lost since (the scheduler clears it when a cycle's
        # transaction fails: its reads may have seen its own claims, rolled back)
        self.ready = False

    # -- reads ---------------------------------------------------------------------------------

    def load(self, s: Session, now: float) -> list[placement.Candidate]:
        """A full read: every owner's first `per_owner` dispatchable jobs; they replace the copy."""
        if self._changes is None and self._feed is not None:
            self._changes = self._feed.subscribe()
        if self._changes is not None:
            self._changes.drain()  # committed before this read: the read sees them
        self._recheck.clear()
        seq_mark = self._read_seq_mark(s)
        query = CANDIDATES["sqlite" if s.get_bind().dialect.name == "sqlite" else "postgresql"]
        rows = s.execute(query, {"queued": sm.QUEUED, "now": now, "per_owner": self.per_owner}).all()
        self._parser.trim()
        out = [self._parser.candidate(r) for r in rows]
        queues: dict[str, list[placement.Candidate]] = {}
        for c in out:
            queues.setdefault(c.owner, []).append(c)
        for q in queues.values():
            q.sort(key=_order)
        self._queues = queues
        self._partial = {o: _order(q[-1]) for o, q in queues.items() if len(q) >= self.per_owner}
        self._owner_of = {c.job_id: c.owner for c in out}
        self._head = {o: q[0] for o, q in queues.items()}
        self._indexed = {o: (-c.priority, c.seq, o) for o, c in self._head.items()}
        self._index = sorted(self._indexed.values())
        self._dirty.clear()
        self._short.clear()
        self._seq_mark, self._due_mark = seq_mark, now
        self.ready = True
        return out

    def refresh(self, s: Session, now: float) -> None:
        """Bring the copy up to date with what changed since the last read (see the module doc)."""
        if self._changes is not None:
            ids, lost = self._changes.drain()
            if lost:
                self.ready = False
            self._recheck |= ids
        seq_mark = self._read_seq_mark(s)
        if seq_mark > self._seq_mark:
            rows = s.execute(_ADMITTED, {"lo": self._seq_mark, "hi": seq_mark}).all()
            self._seq_mark = seq_mark
            for r in rows:
                # one in backoff (a pipeline stage) comes back by _DUE or the feed
                if r[7] == sm.QUEUED and r[8] <= now:
                    self._merge(self._parser.candidate(r))
        if now > self._due_mark:
            due = _DUE["sqlite" if s.get_bind().dialect.name == "sqlite" else "postgresql"]
            due_rows = engine.read_rows(s, due, (self._due_mark, now))
            self._due_mark = now
            for d in due_rows:
                self._merge(self._parser.candidate(d))
        if self._recheck:
            wanted = list(self._recheck)
            found: set[str] = set()
            for i in range(0, len(wanted), ID_CHUNK):
                for r in s.execute(_BY_ID, {"ids": wanted[i : i + ID_CHUNK]}):
                    found.add(r[0])
                    if r[7] == sm.QUEUED and r[8] <= now:
                        self._merge(self._parser.candidate(r))
                    else:
                        self._remove(r[0])
            for job_id in wanted:
                if job_id not in found:
                    self._remove(job_id)  # deleted
            self._recheck.clear()
        for owner in [o for o in self._dirty if not self._queues.get(o)]:
            self._queues.pop(owner, None)
            if owner in self._partial:  # it has more jobs than were held: read them
                self._read_owner(s, owner, now)
        self._reindex()

    def fill(self, s: Session, now: float) -> None:
        """Read again each owner with a frontier that lost held jobs since it was read: the copy
        then holds what a full read would (every owner's first `per_owner` dispatchable jobs), but
        for changes made by other replicas (module doc). Call after `refresh`."""
        for owner in self._short:
            q = self._queues.get(owner)
            if owner in self._partial and (q is None or len(q) < self.per_owner):
                self._read_owner(s, owner, now)
        self._short.clear()
        self._reindex()

    def heads(self) -> list[placement.Candidate]:
        """Each owner's first job in its own order."""
        return [q[0] for q in self._queues.values() if q]

    def held(self) -> list[placement.Candidate]:
        """Every job held, each owner's in its own order."""
        return [c for q in self._queues.values() for c in q]

    def owners(self) -> int:
        """How many owners have a job held."""
        return len(self._index)

    def fair_heads(self, usage: placement.Usage) -> Iterable[placement.Candidate]:
        """Each owner's first job, in the fair order `placement.decide` gives them for `usage`
        (`placement.fair_order_of_heads`: only the owners with usage are keyed). Read `usage` now."""
        return placement.fair_order_of_heads(self._index, self._head, usage)

    def recheck(self, job_ids: Iterable[str]) -> None:
        """Read these jobs again on the next refresh (placed: claimed, or gone, or locked elsewhere)."""
        self._recheck.update(job_ids)

    def _read_seq_mark(self, s: Session) -> int:
        rows = engine.read_rows(s, _SEQ_MARK)
        return int(rows[0][0] or 0) if rows else 0

    # -- the copy ------------------------------------------------------------------------------

    def _merge(self, c: placement.Candidate) -> None:
        if c.job_id in self._owner_of:
            self._remove(c.job_id)
        q = self._queues.get(c.owner)
        if q is None:
            q = self._queues[c.owner] = []
        self._dirty.add(c.owner)
        frontier = self._partial.get(c.owner)
        if frontier is not None and _order(c) > frontier:
            return  # beyond the held prefix of an owner with more jobs: not next
        bisect.insort(q, c, key=_order)
        self._owner_of[c.job_id] = c.owner
        if len(q) > self.per_owner:
            dropped = q.pop()
            del self._owner_of[dropped.job_id]
            self._partial[c.owner] = _order(q[-1])

    def _remove(self, job_id: str) -> None:
        owner = self._owner_of.pop(job_id, None)
        if owner is None:
            return
        q = self._queues[owner]
        for i, c in enumerate(q):
            if c.job_id == job_id:
                del q[i]
                break
        self._dirty.add(owner)
        if owner in self._partial:
            self._short.add(owner)

    def _read_owner(self, s: Session, owner: str, now: float) -> None:
        """Replace what is held of `owner` by its first `per_owner` dispatchable jobs in the ledger."""
        for c in self._queues.pop(owner, ()):
            self._owner_of.pop(c.job_id, None)
        self._partial.pop(owner, None)
        self._dirty.add(owner)
        rows = s.execute(_OWNER, {"queued": sm.QUEUED, "owner": owner, "now": now, "per_owner": self.per_owner}).all()
        if not rows:
            return
        q = self._queues[owner] = [self._parser.candidate(r) for r in rows]
        self._owner_of.update((c.job_id, owner) for c in q)
        if len(q) >= self.per_owner:
            self._partial[owner] = _order(q[-1])

    def _reindex(self) -> None:
        """Bring the index of heads up to date for the owners whose held jobs changed."""
        index, indexed, head = self._index, self._indexed, self._head
        for owner in self._dirty:
            old = indexed.pop(owner, None)
            if old is not None:
                del index[bisect.bisect_left(index, old)]
                del head[owner]
            q = self._queues.get(owner)
            if q:
                key = indexed[owner] = (-q[0].priority, q[0].seq, owner)
                bisect.insort(index, key)
                head[owner] = q[0]
        self._dirty.clear()
