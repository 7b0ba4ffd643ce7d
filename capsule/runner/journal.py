"""The on-disk journal of reported records.

Every record is written here before it is sent, so a lost connection, a restarted control plane or
even a restarted runner loses nothing: the sender resends from the server's cursor. The journal is
also the buffer that keeps the runner's memory bounded while the console is unreachable.

Layout: ``<dir>/<first_seq:020d>.seg`` segment files. A frame is a 16-byte header
``<length u32><crc32 u32><seq u64>`` (little endian) followed by ``length`` payload bytes. Sequence
numbers are contiguous from 1 across segments. Segments whose records are all acknowledged are
deleted (the newest is always kept, so a restarted runner knows where the numbering stands).

Frames are written with one ``os.write`` each, without fsync: the journal protects against
connection loss and process restarts, for which the page cache suffices; a torn frame (the process
was killed mid-write, the node lost power) is detected by its length/CRC when the journal is opened
and cut off, together with anything after it.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import pathlib
import struct
import sys
import zlib
from dataclasses import dataclass

HEADER = struct.Struct("<IIQ")
MAX_PAYLOAD = 8 << 20
SEGMENT_SUFFIX = ".seg"
DEFAULT_SEGMENT_BYTES = 16 << 20


class JournalError(Exception):
    """The journal cannot be used (not writable, or a caller broke the sequence contract)."""


@dataclass
class _Segment:
    first_seq: int
    path: pathlib.Path
    size: int


@dataclass
class _ReadCursor:
    """Where the next sequential read continues, so streaming reads never rescan a segment."""

    segment_first_seq: int
    offset: int
    next_seq: int


def _segment_name(first_seq: int) -> str:
    return f"{first_seq:020d}{SEGMENT_SUFFIX}"


class Journal:
    """Append-only, segmented, crash-tolerant record log with contiguous sequence numbers."""

    def __init__(self, directory: pathlib.Path, *, segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> None:
        self._dir = directory
        self._segment_bytes = segment_bytes
        self._segments: list[_Segment] = []
        self._last_seq = 0
        self._acked_seq = 0
        self._fd = -1
        self._cursor: _ReadCursor | None = None
        # True when no segment was found: nothing was journalled here before this process, so no
        # record of this journal can have reached a server yet.
        self.fresh = False
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self._recover()
            self._open_active()
        except OSError as exc:
            raise JournalError(f"cannot use the journal in {directory}: {exc}") from exc

    # -- state -------------------------------------------------------------------------------

    @property
    def last_seq(self) -> int:
        """Sequence number of the newest record (0 when empty)."""
        return self._last_seq

    @property
    def acked_seq(self) -> int:
        """Highest sequence number the server acknowledged."""
        return self._acked_seq

    @property
    def unacked(self) -> int:
        return self._last_seq - self._acked_seq

    @property
    def directory(self) -> pathlib.Path:
        return self._dir

    def next_seq(self) -> int:
        return self._last_seq + 1

    # -- writing -----------------------------------------------------------------------------

    def append(self, seq: int, payload: bytes) -> None:
        """Append the record numbered ``seq``, which must be ``next_seq()``."""
        if seq != self._last_seq + 1:
            raise JournalError(f"journal expects seq {self._last_seq + 1}, got {seq}")
        if len(payload) > MAX_PAYLOAD:
            raise JournalError(f"record {seq} is {len(payload)} bytes; the limit is {MAX_PAYLOAD}")
        active = self._segments[-1]
        if active.size >= self._segment_bytes and active.first_seq <= self._last_seq:
            self._rotate(seq)
            active = self._segments[-1]
        frame = HEADER.pack(len(payload), zlib.crc32(payload), seq) + payload
        view = memoryview(frame)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        active.size += len(frame)
        self._last_seq = seq

    def ack(self, seq: int) -> None:
        """Record the server's cursor and delete segments that hold only acknowledged records.

        A cursor beyond what was written means the server holds records of an earlier journal
        (e.g. a scratch directory that was wiped); it is clamped, the numbering continues.
        """
        seq = min(seq, self._last_seq)
        if seq <= self._acked_seq:
            if seq < self._acked_seq:
                # The server went back (restored from a backup): resend from its cursor.
                self._acked_seq = max(seq, self._segments[0].first_seq - 1)
            return
        self._acked_seq = seq
        while len(self._segments) > 1 and self._segments[1].first_seq - 1 <= seq:
            gone = self._segments.pop(0)
            gone.path.unlink(missing_ok=True)
            if self._cursor is not None and self._cursor.segment_first_seq == gone.first_seq:
                self._cursor = None

    def close(self) -> None:
        """Close the active segment; flushed to disk only while it holds records the server has
        not acknowledged (the server stores the acknowledged ones: a trivial attempt's records all
        are by now, and its fsync was ~1 ms of a forked runner's time)."""
        if self._fd >= 0:
            if self.unacked:
                with contextlib.suppress(OSError):
                    os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1

    # -- reading -----------------------------------------------------------------------------

    def read(self, from_seq: int, *, max_records: int, max_bytes: int) -> list[tuple[int, bytes]]:
        """Return up to ``max_records`` records starting at ``from_seq`` (at least one if any).

        Stops before ``max_bytes`` of payload would be exceeded, except for the first record.
        """
        if from_seq > self._last_seq or max_records <= 0:
            return []
        if from_seq <= self._segments[0].first_seq - 1:
            raise JournalError(f"record {from_seq} was acknowledged and deleted")
        cursor = self._cursor
        if cursor is None or cursor.next_seq != from_seq:
            cursor = self._locate(from_seq)
        out: list[tuple[int, bytes]] = []
        total = 0
        while len(out) < max_records and cursor.next_seq <= self._last_seq:
            seg_index = self._segment_index(cursor.segment_first_seq)
            segment = self._segments[seg_index]
            if cursor.offset >= segment.size:
                nxt = self._segments[seg_index + 1]
                cursor = _ReadCursor(nxt.first_seq, 0, cursor.next_seq)
                continue
            with segment.path.open("rb") as f:
                f.seek(cursor.offset)
                while len(out) < max_records and cursor.offset < segment.size:
                    length, crc, seq = HEADER.unpack(f.read(HEADER.size))
                    if out and total + length > max_bytes:
                        self._cursor = cursor
                        return out
                    payload = f.read(length)
                    if seq != cursor.next_seq or zlib.crc32(payload) != crc:
                        raise JournalError(f"journal frame for seq {cursor.next_seq} is corrupt")
                    out.append((seq, payload))
                    total += length
                    cursor = _ReadCursor(segment.first_seq, cursor.offset + HEADER.size + length, seq + 1)
        self._cursor = cursor
        return out

    # -- internals ---------------------------------------------------------------------------

    def _segment_index(self, first_seq: int) -> int:
        firsts = [s.first_seq for s in self._segments]
        return bisect.bisect_left(firsts, first_seq)

    def _locate(self, seq: int) -> _ReadCursor:
        firsts = [s.first_seq for s in self._segments]
        index = bisect.bisect_right(firsts, seq) - 1
        segment = self._segments[index]
        offset = 0
        current = segment.first_seq
        with segment.path.open("rb") as f:
            while current < seq:
                length, _crc, _seq = HEADER.unpack(f.read(HEADER.size))
                offset += HEADER.size + length
                f.seek(offset)
                current += 1
        return _ReadCursor(segment.first_seq, offset, seq)

    def _rotate(self, first_seq: int) -> None:
        os.close(self._fd)
        path = self._dir / _segment_name(first_seq)
        self._segments.append(_Segment(first_seq, path, 0))
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def _open_active(self) -> None:
        if not self._segments:
            self._segments.append(_Segment(1, self._dir / _segment_name(1), 0))
        active = self._segments[-1]
        self._fd = os.open(active.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def _recover(self) -> None:
        """Scan existing segments; cut a torn or corrupt tail so numbering stays contiguous."""
        paths = sorted(p for p in self._dir.iterdir() if p.name.endswith(SEGMENT_SUFFIX))
        expected: int | None = None
        for index, path in enumerate(paths):
            try:
                first_seq = int(path.name[: -len(SEGMENT_SUFFIX)])
            except ValueError:
                continue
            if expected is not None and first_seq != expected:
                self._discard(paths[index:], f"segment {path.name} does not continue at seq {expected}")
                break
            size, last = self._scan(path, first_seq)
            self._segments.append(_Segment(first_seq, path, size))
            self._last_seq = last
            expected = last + 1
            if size < path.stat().st_size:
                _warn(f"journal {path.name}: cut a torn record after seq {last}")
                with path.open("r+b") as f:
                    f.truncate(size)
                self._discard(paths[index + 1 :], f"records after seq {last} followed a torn record")
                break
        if self._segments:
            # Everything before the oldest kept segment was acknowledged earlier.
            self._acked_seq = self._segments[0].first_seq - 1
        else:
            self.fresh = True

    @staticmethod
    def _scan(path: pathlib.Path, first_seq: int) -> tuple[int, int]:
        """Return (bytes of valid frames, last valid seq) of one segment."""
        good = 0
        seq_expected = first_seq
        with path.open("rb") as f:
            while True:
                header = f.read(HEADER.size)
                if len(header) < HEADER.size:
                    break
                length, crc, seq = HEADER.unpack(header)
                if seq != seq_expected or length > MAX_PAYLOAD:
                    break
                payload = f.read(length)
                if len(payload) < length or zlib.crc32(payload) != crc:
                    break
                good += HEADER.size + length
                seq_expected += 1
        return good, seq_expected - 1

    def _discard(self, paths: list[pathlib.Path], why: str) -> None:
        for path in paths:
            _warn(f"journal: dropped {path.name}: {why}")
            path.unlink()


def _warn(text: str) -> None:
    print(f"starforge: {text}", file=sys.stderr, flush=True)
