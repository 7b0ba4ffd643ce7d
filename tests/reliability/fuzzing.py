"""Hypothesis strategies for the fuzz tests: random protobuf messages of any type (built from
descriptors, so every request message of every service is covered without a list to maintain),
hostile strings and paths, and the settings every fuzz test shares.

CI runs a fixed, derandomized set of examples (a red test there is a real regression, never luck);
`SF_FUZZ_RANDOM=1` explores new examples (what the fuzz tests were developed with, and what to run
by hand after touching input handling; `SF_FUZZ_SCALE=10` runs ten times the examples). Nothing is stored: no .hypothesis database in the repo.
"""

from __future__ import annotations

import os
import string
from typing import Any, cast

from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

F = FieldDescriptor


def fuzz_settings(max_examples: int) -> settings:
    """`max_examples` in CI; times SF_FUZZ_SCALE when exploring by hand."""
    return settings(
        max_examples=max_examples * int(os.environ.get("SF_FUZZ_SCALE", "1")),
        deadline=None,
        database=None,
        derandomize=os.environ.get("SF_FUZZ_RANDOM") != "1",
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
        print_blob=True,
    )


HOSTILE_STRINGS = [
    "",
    ".",
    "..",
    "../../../../etc/passwd",
    "/etc/passwd",
    "/",
    "a/../../b",
    "a//b",
    "./a",
    "a/./b",
    "a\\..\\b",
    "C:\\Windows",
    "\x00",
    "a\x00b",
    "\n",
    "line\nbreak",
    " ",
    "latest",
    "admin",
    "@admin/lab",
    "@nobody/lab",
    "custom/custom",
    "trl/sft",
    "forge/v2",
    "forge/v1",
    "h200:8",
    "h200:100000",
    "cpu",
    "cpu:-1",
    "host",
    "local",
    "exp",
    "main",
    "j0000000000000",
    "j0000000000000.1",
    "j0000000000000.999999",
    "0",
    "-1",
    "9" * 40,
    "1e309",
    "nan",
    "{}",
    "[]",
    "null",
    '{"a": {"b": {"c": [1, 2, {"d": null}]}}}',
    "[" * 200 + "]" * 200,
    "${HOME}",
    "$(id)",
    "`id`",
    "'; DROP TABLE jobs; --",
    "%s%s%s%n",
    "é🙂漢字",
    "\u202e\u200b",
    "x" * 5000,
    "a/" * 600 + "b",
    "0" * 64,
    "g" * 64,
]

PATH_PARTS = [
    "..",
    ".",
    "",
    "a",
    "b",
    "experiments",
    "exp",
    "train.sh",
    ".git",
    ".env",
    "id_rsa",
    "x" * 300,
    "é",
    "\\",
    "~",
]


def text() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(HOSTILE_STRINGS),
        st.text(max_size=24),
        st.text(alphabet=string.printable, max_size=80),
    )


def hostile_paths() -> st.SearchStrategy[str]:
    """Workspace paths built to escape: '..', absolute, empty parts, backslashes, NUL, long."""
    joined = st.lists(st.sampled_from(PATH_PARTS), min_size=1, max_size=6).map("/".join)
    return st.one_of(
        joined,
        joined.map(lambda p: "/" + p),
        st.sampled_from(HOSTILE_STRINGS),
        st.text(max_size=40),
    )


_INT_RANGES = {
    F.TYPE_INT32: (-(2**31), 2**31 - 1),
    F.TYPE_SINT32: (-(2**31), 2**31 - 1),
    F.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    F.TYPE_INT64: (-(2**63), 2**63 - 1),
    F.TYPE_SINT64: (-(2**63), 2**63 - 1),
    F.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    F.TYPE_UINT32: (0, 2**32 - 1),
    F.TYPE_FIXED32: (0, 2**32 - 1),
    F.TYPE_UINT64: (0, 2**64 - 1),
    F.TYPE_FIXED64: (0, 2**64 - 1),
}


def _int(lo: int, hi: int) -> st.SearchStrategy[int]:
    edges = [v for v in (0, 1, -1, 2, 7, 8, 100, 10**6, lo, hi, hi // 2) if lo <= v <= hi]
    return st.one_of(st.sampled_from(edges), st.integers(lo, hi))


def scalar(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    t = field.type
    if t == F.TYPE_STRING:
        return text()
    if t == F.TYPE_BYTES:
        return st.binary(max_size=64)
    if t == F.TYPE_BOOL:
        return st.booleans()
    if t == F.TYPE_ENUM:
        assert field.enum_type is not None
        known = [v.number for v in field.enum_type.values]
        return st.one_of(st.sampled_from(known), st.integers(-3, 500))
    if t in _INT_RANGES:
        return _int(*_INT_RANGES[t])
    if t == F.TYPE_DOUBLE:
        return st.floats(allow_nan=True, allow_infinity=True)
    if t == F.TYPE_FLOAT:
        return st.floats(width=32, allow_nan=True, allow_infinity=True)
    raise AssertionError(f"unhandled field type {t} of {field.full_name}")


def message_class(desc: Descriptor) -> type[Message]:
    return message_factory.GetMessageClass(desc)


@st.composite
def messages(draw: st.DrawFn, desc: Descriptor, depth: int = 0, max_depth: int = 3) -> Message:
    """A random message of type `desc`: each field present or not, any value its type allows
    (unknown enum numbers, extreme integers, NaN, hostile strings), repeated and map fields with a
    few entries, nested messages down to `max_depth`."""
    msg = message_class(desc)()
    for field in desc.fields:
        if field.message_type is not None and depth >= max_depth:
            continue
        if not draw(st.booleans()):
            continue
        target = getattr(msg, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            key_f = field.message_type.fields_by_name["key"]
            val_f = field.message_type.fields_by_name["value"]
            for k in draw(st.lists(scalar(key_f), max_size=3)):
                if val_f.message_type is not None:
                    target[k].CopyFrom(draw(messages(val_f.message_type, depth + 1, max_depth)))
                else:
                    target[k] = draw(scalar(val_f))
        elif field.is_repeated:
            n = draw(st.integers(0, 3))
            for _ in range(n):
                if field.message_type is not None:
                    target.add().CopyFrom(draw(messages(field.message_type, depth + 1, max_depth)))
                else:
                    target.append(draw(scalar(field)))
        elif field.message_type is not None:
            target.CopyFrom(draw(messages(field.message_type, depth + 1, max_depth)))
        else:
            setattr(msg, field.name, draw(scalar(field)))
    return msg


def mutated(base: Message) -> st.SearchStrategy[Message]:
    """`base` with random fields overwritten, appended to or merged (deep checks get reached),
    or a wholly random message of its type."""

    def merge(part: Message) -> Message:
        out = type(base)()
        out.CopyFrom(base)
        out.MergeFrom(part)
        return out

    random_part = messages(cast(Descriptor, base.DESCRIPTOR))
    return st.one_of(random_part.map(merge), random_part.map(merge), random_part)
