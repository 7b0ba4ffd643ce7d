"""Packed float64 columns as they travel and are stored: little-endian bytes, checked without a
Python float per value.

A `MetricColumns` entry's `values` and `times` are packed doubles on the wire, which is already the
layout of a stored chunk (`metrics.append`). `packed_doubles` takes those bytes out of the entry's
serialisation instead of building a Python list of floats and packing it again. The checks ingest
needs on them (no NaN, times after 1970 and within a Timestamp's range) run lane-wise on one big
integer per column: CPython's big-integer arithmetic walks the bytes in C. Each check is exact for
what it accepts; whatever it refuses goes through ingest's per-value path, which decides.
"""

from __future__ import annotations

import functools
import struct

_LANE = 8
_SIGN = 1 << 63
_EXPONENT = 0x7FF << 52  # all ones: an infinity or a NaN


def _varint(data: bytes, i: int) -> tuple[int, int]:
    """The varint at `data[i:]` and the index after it (IndexError when cut short)."""
    out = shift = 0
    while True:
        b = data[i]
        i += 1
        out |= (b & 0x7F) << shift
        if b < 0x80:
            return out, i
        shift += 7
        if shift > 63:
            raise ValueError("varint over 64 bits")


def length_delimited(data: bytes, fields: frozenset[int]) -> dict[int, bytes] | None:
    """The payloads of the length-delimited `fields` in a serialised message (each at most once;
    other fields skipped). None when the bytes are not what a protobuf serialiser writes for them
    (a field repeated, a malformed tag): the caller then reads the parsed message instead."""
    out: dict[int, bytes] = {}
    i, n = 0, len(data)
    try:
        while i < n:
            key = data[i]  # a tag of field 1..15 is one byte
            if key < 0x80:
                i += 1
            else:
                key, i = _varint(data, i)
            field, wire = key >> 3, key & 7
            if wire == 2:
                size, i = _varint(data, i)
                if field in fields:
                    if field in out or i + size > n:
                        return None
                    out[field] = data[i : i + size]
                i += size
            elif wire == 0:
                _, i = _varint(data, i)
            elif wire == 1:
                i += 8
            elif wire == 5:
                i += 4
            else:
                return None
    except (IndexError, ValueError):
        return None
    return out if i == n else None


@functools.lru_cache(maxsize=256)
def _lanes(pattern: int, count: int) -> int:
    """`pattern` (a 64-bit lane) repeated in `count` lanes of one integer."""
    return int.from_bytes(pattern.to_bytes(_LANE, "little") * count, "little")


def _words(data: bytes) -> tuple[int, int]:
    return int.from_bytes(data, "little"), len(data) // _LANE


def all_finite(data: bytes) -> bool:
    """Whether no double in `data` (packed little-endian) is a NaN or an infinity."""
    x, count = _words(data)
    exponents = x & _lanes(_EXPONENT, count)
    # a lane is 2**63 - (its exponent bits): bit 63 stays set only where they are all ones
    flagged = (_lanes(_SIGN, count) - (exponents ^ _lanes(_EXPONENT, count))) & _lanes(_SIGN, count)
    return flagged == 0


def all_positive_up_to(data: bytes, high: float) -> bool:
    """Whether every double in `data` is > 0 and <= `high` (a positive finite number): no NaN, no
    zero, no negative. Positive doubles order as their bit patterns do, so each lane is compared as
    an unsigned integer, by the borrow it leaves in bit 63."""
    x, count = _words(data)
    if not count:
        return True
    signs = _lanes(_SIGN, count)
    if x & signs:
        return False
    (bound,) = struct.unpack("<Q", struct.pack("<d", high))
    # lane 2**63 + bound - x keeps bit 63 iff x <= bound; lane 2**63 + x - 1 keeps it iff x >= 1
    not_above = ((_lanes(bound, count) | signs) - x) & signs
    above_zero = (x + signs - _lanes(1, count)) & signs
    return not_above == signs and above_zero == signs


def repeat_double(value: float, count: int) -> bytes:
    """`count` copies of `value`, packed little-endian."""
    return struct.pack("<d", value) * count
