"""The in-memory log tails followers are served from: only a contiguous run of one attempt's
offsets, exactly the lines stored, and bounded per job, in total and in time."""

from __future__ import annotations

import tracemalloc

from control.ledger.convert import ts
from control.telemetry.log_tail import NOTHING_NEW, LogTails


def rows(*texts: str) -> list[tuple[int, float, str]]:
    return [(1, 1_700_000_000.25, t) for t in texts]


def texts(tails: LogTails, job: str, cursor: tuple[int, int] | None, attempt: int = 0) -> list[str] | None:
    batch = tails.after(job, cursor, attempt)
    return None if batch is None else [line.text for line in batch.lines]


def test_lines_after_a_cursor_inside_the_run_and_none_outside_it() -> None:
    tails = LogTails()
    tails.add("j", 1, 0, rows("a", "b"))
    tails.add("j", 1, 2, rows("c"))
    assert texts(tails, "j", (1, -1)) == ["a", "b", "c"]  # from the run's start
    assert texts(tails, "j", (1, 0)) == ["b", "c"]
    assert texts(tails, "j", (1, 1)) == ["c"]
    assert tails.after("j", (1, 2)) is NOTHING_NEW  # at its newest line
    assert texts(tails, "j", (1, 3)) is None  # ahead of what this process stored
    assert texts(tails, "j", (0, 9)) is None  # another attempt: the ledger
    assert texts(tails, "j", None) is None
    assert texts(tails, "j", (1, 0), attempt=2) is None
    assert texts(tails, "other", (1, 0)) is None


def test_the_newest_line_held_is_the_runs_last_and_moves_with_a_new_run() -> None:
    tails = LogTails()
    assert tails.newest("j") is None
    tails.add("j", 1, 0, rows("a", "b"))
    tails.add("j", 1, 2, rows("c"))
    assert tails.newest("j") == (1, 2)
    tails.add("j", 2, 0, rows("x"))  # a new attempt starts the run over
    assert tails.newest("j") == (2, 0)
    tails.forget("j")
    assert tails.newest("j") is None


def test_followers_at_one_cursor_share_one_batch_with_the_stored_values() -> None:
    tails = LogTails()
    tails.add("j", 1, 0, rows("a"))
    tails.add("j", 1, 1, rows("b", "c"))
    first, second = tails.after("j", (1, 0)), tails.after("j", (1, 0))
    assert first is second and first is not None and second is not None
    assert first.message(lambda b: object()) is second.message(lambda b: object())
    line = first.lines[0]
    assert (line.attempt_number, line.offset, line.stream, line.text) == (1, 1, 1, "b")
    assert line.time == ts(1_700_000_000.25)  # as the ledger's read converts the stored time


def test_followers_behind_by_several_batches_share_one_joined_batch_until_the_tail_moves() -> None:
    tails = LogTails(max_lines=5)
    tails.add("j", 1, 0, rows("a"))
    tails.add("j", 1, 1, rows("b"))
    tails.add("j", 1, 2, rows("c"))
    first, second = tails.after("j", (1, 0)), tails.after("j", (1, 0))  # woken late: "b" and "c"
    assert first is second and first is not None and second is not None
    assert [line.text for line in first.lines] == ["b", "c"]
    assert first.message(lambda b: object()) is second.message(lambda b: object())
    assert tails.after("j", (1, -1)) is not first  # another cursor, its own lines
    assert texts(tails, "j", (1, -1)) == ["a", "b", "c"]
    tails.add("j", 1, 3, rows("d"))  # the tail moves: a follower at the same cursor gets "d" too
    moved = tails.after("j", (1, 0))
    assert moved is not first and moved is not None
    assert [line.text for line in moved.lines] == ["b", "c", "d"]
    assert [line.text for line in first.lines] == ["b", "c"]  # what was handed out never changes
    tails.add("j", 1, 4, rows("e", "f"))  # over max_lines: "a" dropped, and what was joined with it
    assert texts(tails, "j", (1, -1)) is None  # behind what is held: the ledger
    assert texts(tails, "j", (1, 0)) == ["b", "c", "d", "e", "f"]


def test_a_batch_that_does_not_continue_the_run_starts_it_over() -> None:
    tails = LogTails()
    tails.add("j", 1, 0, rows("a", "b"))
    tails.add("j", 1, 5, rows("f"))  # offsets 2-4 were stored elsewhere (another replica)
    assert texts(tails, "j", (1, 1)) is None  # behind the run: the ledger has 2-4
    assert texts(tails, "j", (1, 4)) == ["f"]
    tails.add("j", 2, 0, rows("next attempt"))
    assert texts(tails, "j", (1, 5)) is None
    assert texts(tails, "j", (2, -1)) == ["next attempt"]


def test_a_job_keeps_its_newest_lines_within_its_bounds() -> None:
    tails = LogTails(max_lines=4)
    for i in range(6):
        tails.add("j", 1, i, rows(str(i)))
    assert tails.held("j") == 4
    assert texts(tails, "j", (1, 0)) is None  # line 1 was dropped from memory
    assert texts(tails, "j", (1, 1)) == ["2", "3", "4", "5"]
    assert texts(tails, "j", (1, 3)) == ["4", "5"]
    big = LogTails(max_bytes=1000)
    big.add("j", 1, 0, rows("x" * 2000))  # one batch over the job's bound: nothing kept
    assert big.held("j") == 0 and len(big) == 0 and big.total_bytes == 0


def test_jobs_are_dropped_when_idle_forgotten_or_over_the_total() -> None:
    now = [0.0]
    tails = LogTails(max_total_bytes=4000, idle_seconds=60, clock=lambda: now[0])
    tails.add("a", 1, 0, rows("x" * 1000))
    tails.add("b", 1, 0, rows("y" * 1000))
    tails.add("a", 1, 1, rows("x"))  # a written last: b goes first
    tails.add("c", 1, 0, rows("z" * 1000))
    assert tails.held("b") == 0 and tails.held("a") == 2 and tails.held("c") == 1
    assert tails.total_bytes <= 4000
    now[0] = 61.0
    tails.add("d", 1, 0, rows("w"))  # a and c were not written for a minute
    assert len(tails) == 1 and tails.held("d") == 1
    tails.forget("d")
    assert len(tails) == 0 and tails.total_bytes == 0


def test_what_a_tail_counts_covers_what_it_holds() -> None:
    """The bytes a tail counts (and is bounded by) are at least what its lines take in memory:
    held as LogLine messages, a one-line batch took ~2 KB where the tail counted ~0.23 KB, so its
    64 MiB bound let the console hold ~0.5 GB, and the soak's console grew by ~12 MiB a minute."""
    for per_batch in (1, 10, 100):
        tails = LogTails(max_total_bytes=1 << 40, max_bytes=1 << 40, max_lines=10**9)
        batches = [
            [(1, 1_700_000_000.0 + j, f"tick {j} of batch {b}: loss=0.{j:04d}") for j in range(per_batch)]
            for b in range(20_000 // per_batch)
        ]
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for b, lines in enumerate(batches):
                tails.add(f"job-{b % 100}", 1, (b // 100) * per_batch, lines)
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert 0 < held <= tails.total_bytes, (per_batch, held, tails.total_bytes)
