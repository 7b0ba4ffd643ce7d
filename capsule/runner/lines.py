"""Turning a byte stream into log lines, and lines into bounded chunks.

Pure logic (no I/O, no clock) so that it can be tested exactly; ``logs.py`` drives it.
"""

from __future__ import annotations

MAX_LINE_BYTES = 64 * 1024
CHUNK_MAX_LINES = 500
# Keeps every LogChunk record far below the ingest service's 1 MiB record limit.
CHUNK_MAX_BYTES = 256 * 1024


def _utf8_cut(data: bytearray, start: int, limit: int) -> int:
    """Index of the largest cut <= start+limit that does not split a UTF-8 sequence.

    Needs ``len(data) > start + limit``. Falls back to ``start + limit`` for bytes that are not
    UTF-8 at all.
    """
    cut = start + limit
    for _ in range(3):
        if (data[cut] & 0xC0) != 0x80:
            return cut
        cut -= 1
    return cut if (data[cut] & 0xC0) != 0x80 else start + limit


def _decode(raw: bytes | bytearray) -> str:
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    return raw.decode("utf-8", errors="replace")


class LineSplitter:
    """Splits bytes into lines on ``\\n``; lines over ``max_line_bytes`` are split into pieces.

    A trailing ``\\r`` is dropped (CRLF output); bytes that are not UTF-8 become U+FFFD. The tail of
    a stream without a final newline comes out of ``finish()``.
    """

    def __init__(self, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._max = max_line_bytes
        self._pending = bytearray()

    def feed(self, data: bytes) -> list[str]:
        self._pending += data
        lines: list[str] = []
        start = 0
        buf = self._pending
        while True:
            newline = buf.find(b"\n", start)
            end = len(buf) if newline < 0 else newline
            while end - start > self._max:
                cut = _utf8_cut(buf, start, self._max)
                lines.append(_decode(buf[start:cut]))
                start = cut
            if newline < 0:
                break
            lines.append(_decode(buf[start:newline]))
            start = newline + 1
        del buf[:start]
        return lines

    def finish(self) -> list[str]:
        """Flush an unterminated last line (end of stream)."""
        if not self._pending:
            return []
        line = _decode(self._pending)
        self._pending.clear()
        return [line]


class ChunkBuffer:
    """Collects lines into chunks of at most ``max_lines`` lines / ``max_bytes`` characters.

    ``add`` returns the chunks that became full; the owner flushes the rest on a timer via
    ``take``. Sizes are counted in characters: decoded from bytes, a character takes at most 3
    UTF-8 bytes on the wire (a replaced invalid byte), so a chunk stays under 1 MiB.
    """

    def __init__(self, max_lines: int = CHUNK_MAX_LINES, max_bytes: int = CHUNK_MAX_BYTES) -> None:
        self._max_lines = max_lines
        self._max_bytes = max_bytes
        self._lines: list[str] = []
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._lines)

    def add(self, lines: list[str]) -> list[list[str]]:
        full: list[list[str]] = []
        for line in lines:
            if self._lines and self._bytes + len(line) > self._max_bytes:
                full.append(self.take())
            self._lines.append(line)
            self._bytes += len(line)
            if len(self._lines) >= self._max_lines or self._bytes >= self._max_bytes:
                full.append(self.take())
        return full

    def take(self) -> list[str]:
        lines, self._lines, self._bytes = self._lines, [], 0
        return lines
