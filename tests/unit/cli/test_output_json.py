"""`sf -o json` documents: `dumps_indented` writes exactly what `json.dumps(indent=2)` writes, and
`job_to_dict` gives exactly what `message_to_dict` gives, including for a 10,000-file workspace."""

from __future__ import annotations

import datetime as dt
import enum
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs
from starforge_api.job.v1 import job_pb2

from cli.output import _json_default, dumps_indented, job_to_dict, message_to_dict


def stdlib(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=False, default=_json_default)


# Strings that try to look like the separators and braces the fast path replaces.
TRICKY = ["", "}", "{", "},", "},\0{", "\0", "\1", "\n", '"', "\\", "é", "😀", "a\u2028b", '{"x": 1}', "[]"]
texts = hs.one_of(hs.sampled_from(TRICKY), hs.text(max_size=12))
scalars = hs.one_of(
    hs.none(),
    hs.booleans(),
    hs.integers(min_value=-(2**70), max_value=2**70),
    hs.floats(allow_nan=True, allow_infinity=True),
    texts,
)
keys = hs.one_of(texts, hs.integers(min_value=-5, max_value=5), hs.booleans(), hs.none(), hs.floats())
flat_records = hs.lists(hs.dictionaries(texts, hs.one_of(hs.none(), hs.booleans(), hs.integers(), texts)), max_size=6)
docs = hs.recursive(
    hs.one_of(scalars, flat_records),
    lambda inner: hs.one_of(
        hs.lists(inner, max_size=5),
        hs.lists(inner, max_size=5).map(tuple),
        hs.dictionaries(keys, inner, max_size=5),
    ),
    max_leaves=30,
)


@settings(max_examples=400)
@given(docs)
def test_the_same_text_as_the_standard_library(doc: Any) -> None:
    assert dumps_indented(doc, _json_default) == stdlib(doc)


@pytest.mark.parametrize(
    "doc",
    [
        [],
        {},
        [{}],
        [{"a": 1}, {}],
        [{"a": "},\0{"}, {"b": "\0"}],
        [{"a": 1.5}],  # a float value: not a flat record, the general path
        {"rows": [{"path": "x", "size": "3", "executable": True}, {"path": "y"}], "n": [1, [2, []]]},
        {2: "int key", 2.5: "float key", True: "t", False: "f", None: "n", math.inf: "inf", -math.inf: "-inf"},
        [math.nan, -math.inf, 1e300, -0.0],
        ("tuple", ["in", ("tuples",)]),
    ],
)
def test_edge_cases(doc: Any) -> None:
    assert dumps_indented(doc, _json_default) == stdlib(doc)


class Colour(enum.Enum):
    red = "red"


def test_the_default_hook_for_messages_dates_and_enums() -> None:
    job = job_pb2.Job(job_id="j-1", experiment="exp")
    doc = {"job": job, "at": dt.datetime(2026, 1, 2, 3, 4, 5), "day": dt.date(2026, 1, 2), "colour": Colour.red}
    assert dumps_indented(doc, _json_default) == stdlib(doc)
    with pytest.raises(TypeError):
        dumps_indented({"x": object()}, _json_default)


def test_refusals_as_the_standard_library() -> None:
    with pytest.raises(TypeError, match="keys must be"):
        dumps_indented({(1, 2): "tuple key"}, _json_default)
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular reference"):
        dumps_indented(loop, _json_default)
    d: dict[str, Any] = {}
    d["self"] = [d]
    with pytest.raises(ValueError, match="Circular reference"):
        dumps_indented(d, _json_default)


def test_a_container_seen_twice_is_not_a_cycle() -> None:
    shared = {"a": [1, 2]}
    doc = {"x": shared, "y": shared, "z": [shared, shared]}
    assert dumps_indented(doc, _json_default) == stdlib(doc)


def _job(n: int) -> job_pb2.Job:
    job = job_pb2.Job(job_id="j-1", experiment="exp", method="custom/custom")
    workspace = job.spec.workspace
    for i in range(n):
        # every combination of default (left out) and set fields
        workspace.files.add(
            path=f"data/f{i}" if i % 5 else "",
            sha256=f"{i:064x}" if i % 3 else "",
            size=i * 1000 if i % 4 else 0,
            executable=i % 2 == 0,
        )
    return job


@pytest.mark.parametrize("n", [1, 7, 10_000])
def test_job_to_dict_is_message_to_dict(n: int) -> None:
    job = _job(n)
    assert json.dumps(job_to_dict(job)) == json.dumps(message_to_dict(job))  # key order too
    job.spec.workspace.digest = "d" * 64
    job.spec.workspace.total_bytes = 123
    assert json.dumps(job_to_dict(job)) == json.dumps(message_to_dict(job))
    assert len(job.spec.workspace.files) == n  # the job itself is left as it was


def test_job_to_dict_without_files() -> None:
    for job in (job_pb2.Job(job_id="j"), _job(0)):
        assert job_to_dict(job) == message_to_dict(job)
    job = job_pb2.Job(job_id="j")
    job.spec.workspace.digest = "d" * 64  # a workspace named by digest alone
    assert json.dumps(job_to_dict(job)) == json.dumps(message_to_dict(job))


def test_a_submit_document_prints_the_same() -> None:
    doc = {"job": job_to_dict(_job(50)), "warnings": ["w"], "dry_run": False, "upload": {"files_uploaded": 3}}
    assert dumps_indented(doc, _json_default) == stdlib({**doc, "job": message_to_dict(_job(50))})
