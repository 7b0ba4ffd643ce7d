"""The runner's on-disk journal: append, ack, replay, and recovery from a torn last record."""

from __future__ import annotations

import os
import pathlib

import pytest

from capsule.runner.journal import HEADER, Journal, JournalError


def fill(journal: Journal, count: int, size: int = 10) -> list[bytes]:
    payloads = []
    for _ in range(count):
        seq = journal.next_seq()
        payload = f"record-{seq}".encode().ljust(size, b".")
        journal.append(seq, payload)
        payloads.append(payload)
    return payloads


def test_append_assigns_contiguous_sequence_numbers_and_reads_back(tmp_path: pathlib.Path) -> None:
    journal = Journal(tmp_path)
    payloads = fill(journal, 5)
    assert journal.last_seq == 5
    assert journal.read(1, max_records=10, max_bytes=1 << 20) == list(zip(range(1, 6), payloads, strict=True))
    assert journal.read(4, max_records=10, max_bytes=1 << 20) == [(4, payloads[3]), (5, payloads[4])]
    assert journal.read(6, max_records=10, max_bytes=1 << 20) == []


def test_append_refuses_a_gap(tmp_path: pathlib.Path) -> None:
    journal = Journal(tmp_path)
    fill(journal, 2)
    with pytest.raises(JournalError, match="expects seq 3"):
        journal.append(5, b"x")


def test_read_respects_record_and_byte_limits_but_returns_at_least_one(tmp_path: pathlib.Path) -> None:
    journal = Journal(tmp_path)
    fill(journal, 10, size=100)
    assert [s for s, _ in journal.read(1, max_records=3, max_bytes=1 << 20)] == [1, 2, 3]
    assert [s for s, _ in journal.read(4, max_records=10, max_bytes=250)] == [4, 5]
    assert [s for s, _ in journal.read(6, max_records=10, max_bytes=1)] == [6]
    # Sequential reads continue where the previous one stopped; a reconnect rewinds anywhere.
    assert [s for s, _ in journal.read(7, max_records=2, max_bytes=1 << 20)] == [7, 8]
    assert [s for s, _ in journal.read(2, max_records=2, max_bytes=1 << 20)] == [2, 3]


def test_ack_deletes_fully_acknowledged_segments_but_keeps_the_newest(tmp_path: pathlib.Path) -> None:
    journal = Journal(tmp_path, segment_bytes=200)
    fill(journal, 30, size=50)  # ~66 bytes per frame: 3-4 frames per segment
    segments = sorted(tmp_path.glob("*.seg"))
    assert len(segments) > 5
    journal.ack(20)
    left = sorted(tmp_path.glob("*.seg"))
    assert len(left) < len(segments)
    first_kept = int(left[0].name.split(".")[0])
    assert first_kept <= 21
    assert [s for s, _ in journal.read(21, max_records=100, max_bytes=1 << 20)] == list(range(21, 31))
    journal.ack(30)
    assert len(list(tmp_path.glob("*.seg"))) == 1
    assert journal.unacked == 0
    fill(journal, 1)
    assert journal.last_seq == 31


def test_reopening_continues_the_numbering_and_replays_unacked(tmp_path: pathlib.Path) -> None:
    journal = Journal(tmp_path, segment_bytes=200)
    payloads = fill(journal, 12, size=50)
    journal.close()
    reopened = Journal(tmp_path, segment_bytes=200)
    assert reopened.last_seq == 12
    assert reopened.read(3, max_records=100, max_bytes=1 << 20) == list(zip(range(3, 13), payloads[2:], strict=True))
    fill(reopened, 1)
    assert reopened.last_seq == 13


def test_a_torn_last_record_is_cut_off_on_open(tmp_path: pathlib.Path) -> None:
    journal = Journal(tmp_path)
    payloads = fill(journal, 3, size=40)
    journal.close()
    [segment] = tmp_path.glob("*.seg")
    size = segment.stat().st_size
    with segment.open("r+b") as f:
        f.truncate(size - 7)  # the runner died in the middle of writing record 3
    reopened = Journal(tmp_path)
    assert reopened.last_seq == 2
    assert segment.stat().st_size == 2 * (HEADER.size + 40)
    assert reopened.read(1, max_records=10, max_bytes=1 << 20) == [(1, payloads[0]), (2, payloads[1])]
    fill(reopened, 1)
    assert [s for s, _ in reopened.read(1, max_records=10, max_bytes=1 << 20)] == [1, 2, 3]


def test_a_corrupt_record_and_everything_after_it_is_dropped(tmp_path: pathlib.Path) -> None:
    journal = Journal(tmp_path, segment_bytes=150)
    fill(journal, 8, size=40)
    journal.close()
    segments = sorted(tmp_path.glob("*.seg"))
    assert len(segments) >= 3
    data = bytearray(segments[1].read_bytes())
    data[HEADER.size + 3] ^= 0xFF  # flip a payload byte of the segment's first record
    segments[1].write_bytes(bytes(data))
    reopened = Journal(tmp_path, segment_bytes=150)
    first_of_second = int(segments[1].name.split(".")[0])
    assert reopened.last_seq == first_of_second - 1
    assert not segments[2].exists()
    fill(reopened, 1)
    assert reopened.last_seq == first_of_second


def test_a_cursor_beyond_the_journal_is_clamped(tmp_path: pathlib.Path) -> None:
    journal = Journal(tmp_path)
    fill(journal, 3)
    journal.ack(10)
    assert journal.acked_seq == 3


def test_only_a_journal_this_process_created_is_fresh(tmp_path: pathlib.Path) -> None:
    # A fresh journal lets the sender skip GetCursor on its first connection; a reopened one
    # (a restarted runner), even one whose records were all acknowledged, is not fresh.
    journal = Journal(tmp_path)
    assert journal.fresh
    fill(journal, 3)
    journal.ack(3)
    journal.close()
    again = Journal(tmp_path)
    assert not again.fresh
    assert again.next_seq() == 4


def test_close_flushes_to_disk_only_what_the_server_has_not_acknowledged(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    acked = Journal(tmp_path / "acked")
    fill(acked, 3)
    acked.ack(3)
    acked.close()
    assert synced == []
    pending = Journal(tmp_path / "pending")
    fill(pending, 3)
    pending.ack(2)
    pending.close()
    assert len(synced) == 1
    assert Journal(tmp_path / "pending").last_seq == 3
