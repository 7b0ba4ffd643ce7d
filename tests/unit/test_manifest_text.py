"""The canonical manifest text the console stores for a workspace named by digest: its sha256 is
the manifest digest, and only canonical text parses back."""

from __future__ import annotations

import hashlib

import pytest

from common.hashing import manifest_digest, manifest_text, parse_manifest_text

A, B = "a" * 64, "b" * 64


def test_the_text_hashes_to_the_manifest_digest_and_parses_back() -> None:
    files = [("src/x.py", A, False), ("run.sh", B, True), ("src/ü.txt", A, False)]
    text = manifest_text(files)
    assert hashlib.sha256(text).hexdigest() == manifest_digest(files)
    assert parse_manifest_text(text) == sorted(files)
    assert parse_manifest_text(b"") == []


@pytest.mark.parametrize(
    "text",
    [
        f"{A} 644 b\n{A} 644 a\n",  # out of order
        f"{A} 644 a\n{B} 644 a\n",  # listed twice
        f"{A} 600 a\n",  # not a mode of a manifest
        f"{A.upper()} 644 a\n",  # not a digest
        f"{A} 644 \n",  # no path
        f"{A} 644 a",  # no final line break
        f"{A}  644 a\n",
        "not a manifest\n",
    ],
)
def test_anything_but_canonical_text_is_refused(text: str) -> None:
    assert parse_manifest_text(text.encode()) is None


def test_text_that_is_not_utf8_is_refused() -> None:
    assert parse_manifest_text(A.encode() + b" 644 \xff\n") is None
