"""BlobStore.put_many (whole blobs behind one durability barrier) and the start-up sweep of temporary
files, which must spare another replica's write in progress."""

from __future__ import annotations

import hashlib
import os
import pathlib
import time

import pytest

from common import errors
from control.blobstore import STALE_TMP_SECONDS, BlobStore


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_put_many_stores_new_blobs_and_reports_present_ones(tmp_path: pathlib.Path) -> None:
    store = BlobStore(tmp_path)
    assert store.put_many([(_digest(b"a"), b"a"), (_digest(b"b"), b"b"), (_digest(b"a"), b"a")]) == [True, True, False]
    assert store.put_many([(_digest(b"b"), b"b")]) == [False]
    assert store.read_bytes(_digest(b"a")) == b"a"
    assert (store.stats.blobs_written, store.stats.blobs_already_present) == (2, 2)
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_bad_blob_fails_the_whole_batch(tmp_path: pathlib.Path) -> None:
    store = BlobStore(tmp_path, max_blob_bytes=10)
    with pytest.raises(errors.InvalidArgument, match="does not match its digest"):
        store.put_many([(_digest(b"ok"), b"ok"), (_digest(b"x"), b"y")])
    with pytest.raises(errors.InvalidArgument, match="the limit is 10 bytes"):
        store.put_many([(_digest(b"ok"), b"ok"), (_digest(b"x" * 11), b"x" * 11)])
    assert not store.has(_digest(b"ok"))
    assert list((tmp_path / "tmp").iterdir()) == []


def test_start_removes_only_stale_temporary_files(tmp_path: pathlib.Path) -> None:
    BlobStore(tmp_path)
    stale, fresh = tmp_path / "tmp" / "stale.part", tmp_path / "tmp" / "fresh.part"
    stale.write_bytes(b"left by a crash")
    fresh.write_bytes(b"another replica's write in progress")
    old = time.time() - STALE_TMP_SECONDS - 60
    os.utime(stale, (old, old))
    BlobStore(tmp_path)
    assert not stale.exists()
    assert fresh.exists()


def test_put_many_makes_a_removed_shard_folder_again_and_refuses_a_bad_digest(tmp_path: pathlib.Path) -> None:
    store = BlobStore(tmp_path)
    assert store.put_many([(_digest(b"a"), b"a")]) == [True]
    (tmp_path / _digest(b"a")[:2] / _digest(b"a")).unlink()
    (tmp_path / _digest(b"a")[:2]).rmdir()  # by hand, behind the store's back
    assert store.put_many([(_digest(b"a"), b"a")]) == [True]
    assert store.read_bytes(_digest(b"a")) == b"a"
    with pytest.raises(errors.InvalidArgument, match="not a sha256 digest"):
        store.put_many([(_digest(b"b"), b"b"), ("../" + _digest(b"c")[3:], b"c")])
    assert not store.has(_digest(b"b"))
    assert list((tmp_path / "tmp").iterdir()) == []
