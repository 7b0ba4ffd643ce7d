"""Splitting the training command's output into lines and coalescing lines into chunks."""

from __future__ import annotations

from capsule.runner.lines import ChunkBuffer, LineSplitter


def test_lines_split_across_reads_and_crlf() -> None:
    splitter = LineSplitter()
    assert splitter.feed(b"hel") == []
    assert splitter.feed(b"lo\nwor") == ["hello"]
    assert splitter.feed(b"ld\r\n\nlast") == ["world", ""]
    assert splitter.finish() == ["last"]
    assert splitter.finish() == []


def test_invalid_utf8_is_replaced_not_fatal() -> None:
    splitter = LineSplitter()
    assert splitter.feed(b"caf\xc3\xa9 \xff\xfe ok\n") == ["café \ufffd\ufffd ok"]


def test_long_lines_are_split_at_the_limit_without_cutting_a_character() -> None:
    splitter = LineSplitter(max_line_bytes=10)
    assert splitter.feed(b"0123456789abcdefghij12345\n") == ["0123456789", "abcdefghij", "12345"]
    # "é" is two bytes: a cut at byte 10 would split it, so the first piece ends before it.
    pieces = splitter.feed("123456789é12345\n".encode())
    assert pieces == ["123456789", "é12345"]
    # Without a newline, a long line is still emitted in pieces as it arrives.
    assert splitter.feed(b"x" * 25) == ["x" * 10, "x" * 10]
    assert splitter.finish() == ["x" * 5]


def test_default_limit_is_64_kib() -> None:
    splitter = LineSplitter()
    lines = splitter.feed(b"a" * (64 * 1024 * 2 + 5) + b"\n")
    assert [len(line) for line in lines] == [64 * 1024, 64 * 1024, 5]


def test_chunks_close_at_500_lines_or_the_byte_budget() -> None:
    buffer = ChunkBuffer()
    full = buffer.add([f"line {i}" for i in range(1234)])
    assert [len(chunk) for chunk in full] == [500, 500]
    assert len(buffer) == 234
    assert buffer.take()[0] == "line 1000"
    assert len(buffer) == 0

    small = ChunkBuffer(max_lines=100, max_bytes=25)
    chunks = small.add(["0123456789", "0123456789", "0123456789", "x"])
    assert chunks == [["0123456789", "0123456789"]]
    assert small.take() == ["0123456789", "x"]


def test_a_line_bigger_than_the_budget_is_its_own_chunk() -> None:
    buffer = ChunkBuffer(max_lines=100, max_bytes=10)
    assert buffer.add(["ab", "x" * 50, "cd"]) == [["ab"], ["x" * 50]]
    assert buffer.take() == ["cd"]
