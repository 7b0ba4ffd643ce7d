"""The lane-wise checks of packed float64 columns agree with a check of each value, and the
serialisation reader takes exactly the packed fields a protobuf serialiser wrote."""

from __future__ import annotations

import math
import struct

from hypothesis import given
from hypothesis import strategies as hs
from starforge_api.ingest.v1 import ingest_service_pb2 as pb

from control.telemetry import packed
from control.telemetry.ingest import MAX_SECONDS

SPECIAL = [
    0.0,
    -0.0,
    math.inf,
    -math.inf,
    math.nan,
    5e-324,
    -5e-324,
    MAX_SECONDS,
    math.nextafter(MAX_SECONDS, math.inf),
]
DOUBLES = hs.one_of(hs.floats(allow_nan=True, allow_infinity=True), hs.sampled_from(SPECIAL))


def pack(values: list[float]) -> bytes:
    return struct.pack(f"<{len(values)}d", *values)


@given(hs.lists(DOUBLES, max_size=40))
def test_all_finite_is_each_value_finite(values: list[float]) -> None:
    assert packed.all_finite(pack(values)) == all(math.isfinite(v) for v in values)


@given(hs.lists(DOUBLES, max_size=40))
def test_all_positive_up_to_is_each_value_in_range(values: list[float]) -> None:
    assert packed.all_positive_up_to(pack(values), MAX_SECONDS) == all(0.0 < v <= MAX_SECONDS for v in values)


def test_a_nan_with_any_payload_is_seen() -> None:
    for bits in (0x7FF0000000000001, 0xFFF8000000000000, 0x7FFFFFFFFFFFFFFF, 0xFFF0000000000001):
        data = pack([1.0, 2.0]) + bits.to_bytes(8, "little") + pack([3.0])
        assert not packed.all_finite(data)
        assert not packed.all_positive_up_to(data, MAX_SECONDS)


@given(
    hs.text(max_size=30),
    hs.lists(hs.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=20),
    hs.lists(hs.floats(allow_nan=False), max_size=20),
    hs.lists(hs.floats(allow_nan=False), max_size=20),
)
def test_length_delimited_reads_what_protobuf_wrote(
    name: str, steps: list[int], values: list[float], times: list[float]
) -> None:
    data = pb.MetricColumns(name=name, steps=steps, values=values, times=times).SerializeToString()
    fields = packed.length_delimited(data, frozenset({3, 4}))
    assert fields is not None
    assert fields.get(3, b"") == pack(values)
    assert fields.get(4, b"") == pack(times)


@given(hs.binary(max_size=64))
def test_length_delimited_never_fails_on_any_bytes(data: bytes) -> None:
    fields = packed.length_delimited(data, frozenset({3, 4}))
    assert fields is None or all(isinstance(v, bytes) for v in fields.values())


def test_a_field_sent_twice_or_cut_short_is_refused() -> None:
    twice = pb.MetricColumns(values=[1.0]).SerializeToString() * 2
    assert packed.length_delimited(twice, frozenset({3})) is None
    cut = pb.MetricColumns(values=[1.0, 2.0]).SerializeToString()[:-1]
    assert packed.length_delimited(cut, frozenset({3})) is None


@given(hs.lists(hs.lists(hs.integers(min_value=-50, max_value=50), min_size=1, max_size=6), min_size=1, max_size=5))
def test_a_chunks_steps_read_back_as_reported(parts: list[list[int]]) -> None:
    """Steps added in parts (one per entry) come back in order, with or without a stored array."""
    from control.telemetry import metrics

    cols = [(steps, pack([0.0] * len(steps)), pack([1.0] * len(steps))) for steps in parts]
    first, last, data = metrics._chunk_steps(cols)
    flat = [step for steps in parts for step in steps]
    assert list(metrics._steps_of(data, first, last, len(flat))) == flat
    assert (first, last) == (min(flat), max(flat))
