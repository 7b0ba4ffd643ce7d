"""Packs of small blobs (control/blobpacks.py): what is packed, what stays loose, that every reader
and another replica on the same folder find packed blobs at once, that a store of an earlier
release stays loose until its `packs` folder is made, and what a crash or a failed write leaves."""

from __future__ import annotations

import hashlib
import os
import pathlib
import time

import pytest

from common import errors
from control.blobpacks import PACK_MAX_BLOB, PACK_MIN_BLOBS, RESCAN_MARGIN_NS, STALE_PACK_SECONDS
from control.blobstore import STALE_TMP_SECONDS, BlobStore

Blobs = list[tuple[str, bytes]]


def _blobs(n: int, tag: str = "", size: int = 100) -> Blobs:
    out = []
    for i in range(n):
        data = (f"{tag} blob {i} ".encode() * size)[: size + i]
        out.append((hashlib.sha256(data).hexdigest(), data))
    return out


def _files(folder: pathlib.Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def _loose(root: pathlib.Path) -> list[str]:
    return sorted(p.name for p in root.glob("??/*"))


def test_a_batch_of_small_blobs_is_one_pack_and_every_reader_finds_them(tmp_path: pathlib.Path) -> None:
    store = BlobStore(tmp_path)
    blobs = _blobs(PACK_MIN_BLOBS + 8)
    assert store.put_many(blobs) == [True] * len(blobs)
    assert _loose(tmp_path) == []
    packs = _files(tmp_path / "packs")
    assert len(packs) == 2 and packs[0].endswith(".idx") and packs[1].endswith(".pack")
    assert _files(tmp_path / "tmp") == []
    digests = [d for d, _ in blobs]
    assert store.sizes(digests) == {d: len(data) for d, data in blobs}
    assert store.missing([*digests, hashlib.sha256(b"absent").hexdigest()]) == [hashlib.sha256(b"absent").hexdigest()]
    for d, data in blobs:
        assert store.has(d) and store.size(d) == len(data)
        assert store.read_bytes(d) == data
        assert b"".join(store.read(d, offset=7)) == data[7:]
        assert b"".join(store.read(d, offset=len(data) + 5)) == b""
        assert store.read_prefix(d, 10) == data[:10]
        assert store.read_prefix(d, 10**6) == data
    # stored again: already present, nothing written
    assert store.put_many(blobs) == [False] * len(blobs)
    assert len(_files(tmp_path / "packs")) == 2
    assert store.stats.blobs_written == len(blobs) and store.stats.blobs_already_present == len(blobs)


def test_another_replica_finds_a_pack_written_after_it_started(tmp_path: pathlib.Path) -> None:
    writer, reader = BlobStore(tmp_path), BlobStore(tmp_path)
    first = _blobs(PACK_MIN_BLOBS, "first")
    writer.put_many(first)
    assert reader.missing([d for d, _ in first]) == []
    later = _blobs(PACK_MIN_BLOBS, "later")
    writer.put_many(later)
    d, data = later[3]
    assert reader.read_bytes(d) == data  # a read before any size question also reads the folder again
    assert BlobStore(tmp_path).read_prefix(later[5][0], 4) == later[5][1][:4]  # a restart reads every index
    # the reader's upload of the same blobs stores nothing again
    assert reader.put_many(later) == [False] * len(later)


def test_few_blobs_and_large_blobs_stay_loose(tmp_path: pathlib.Path) -> None:
    store = BlobStore(tmp_path)
    few = _blobs(PACK_MIN_BLOBS - 1, "few")
    store.put_many(few)
    assert len(_loose(tmp_path)) == len(few) and _files(tmp_path / "packs") == []
    big = os.urandom(PACK_MAX_BLOB + 1)
    mixed = [*_blobs(PACK_MIN_BLOBS, "mixed"), (hashlib.sha256(big).hexdigest(), big)]
    store.put_many(mixed)
    assert hashlib.sha256(big).hexdigest() in _loose(tmp_path)
    assert len(_loose(tmp_path)) == len(few) + 1 and len(_files(tmp_path / "packs")) == 2
    for d, data in [*few, *mixed]:
        assert store.read_bytes(d) == data


def test_a_store_of_an_earlier_release_stays_loose_until_its_packs_folder_is_made(tmp_path: pathlib.Path) -> None:
    old = b"written by the release before packs"
    (tmp_path / "tmp").mkdir()
    (tmp_path / hashlib.sha256(old).hexdigest()[:2]).mkdir()
    (tmp_path / hashlib.sha256(old).hexdigest()[:2] / hashlib.sha256(old).hexdigest()).write_bytes(old)
    store = BlobStore(tmp_path)
    assert not (tmp_path / "packs").exists()
    batch = _blobs(PACK_MIN_BLOBS, "before")
    store.put_many(batch)
    assert len(_loose(tmp_path)) == len(batch) + 1 and not (tmp_path / "packs").exists()
    # once no replica of the earlier release reads the folder, an operator makes it: no restart
    (tmp_path / "packs").mkdir()
    after = _blobs(PACK_MIN_BLOBS, "after")
    store.put_many(after)
    assert len(_loose(tmp_path)) == len(batch) + 1 and len(_files(tmp_path / "packs")) == 2
    assert store.read_bytes(hashlib.sha256(old).hexdigest()) == old
    assert all(store.read_bytes(d) == data for d, data in after)


def test_a_failed_pack_write_leaves_nothing_and_publishes_nothing(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = BlobStore(tmp_path)
    blobs = _blobs(PACK_MIN_BLOBS, "doomed")

    def full_disk(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "rename", full_disk)
    with pytest.raises(OSError, match="No space left"):
        store.put_many(blobs)
    monkeypatch.undo()
    assert _files(tmp_path / "packs") == [] and _files(tmp_path / "tmp") == []
    assert store.missing([d for d, _ in blobs]) == [d for d, _ in blobs]
    assert store.stats.blobs_written == 0
    assert store.put_many(blobs) == [True] * len(blobs)


def test_a_bad_blob_fails_a_batch_that_would_be_packed(tmp_path: pathlib.Path) -> None:
    store = BlobStore(tmp_path)
    blobs = _blobs(PACK_MIN_BLOBS, "bad")
    blobs[-1] = (blobs[-1][0], b"not what was hashed")
    with pytest.raises(errors.InvalidArgument, match="does not match its digest"):
        store.put_many(blobs)
    assert _files(tmp_path / "packs") == [] and _loose(tmp_path) == []


def test_start_removes_an_old_pack_without_an_index_and_spares_a_write_in_progress(tmp_path: pathlib.Path) -> None:
    store = BlobStore(tmp_path)
    kept = _blobs(PACK_MIN_BLOBS, "kept")
    store.put_many(kept)
    crashed, writing = tmp_path / "packs" / "0-1-crashed.pack", tmp_path / "packs" / "0-2-writing.pack"
    crashed.write_bytes(b"content whose index never came")
    writing.write_bytes(b"another replica's pack in progress")
    index_tmp = tmp_path / "tmp" / "0-1-crashed.idx"
    index_tmp.write_bytes(b"an index never renamed")
    old = time.time() - max(STALE_PACK_SECONDS, STALE_TMP_SECONDS) - 60
    os.utime(crashed, (old, old))
    os.utime(index_tmp, (old, old))
    again = BlobStore(tmp_path)
    assert not crashed.exists() and not index_tmp.exists()
    assert writing.exists()
    assert all(again.read_bytes(d) == data for d, data in kept)


def test_an_unreadable_index_is_skipped_and_the_other_packs_served(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = BlobStore(tmp_path)
    kept = _blobs(PACK_MIN_BLOBS, "kept")
    store.put_many(kept)
    (tmp_path / "packs" / "0-3-broken.idx").write_bytes(b"not an index")
    (tmp_path / "packs" / "0-3-broken.pack").write_bytes(b"")
    again = BlobStore(tmp_path)
    assert "0-3-broken.idx is not a pack index" in caplog.text
    assert all(again.read_bytes(d) == data for d, data in kept)
    with pytest.raises(errors.NotFound):
        again.size(hashlib.sha256(b"nowhere").hexdigest())


def test_a_pack_published_in_the_same_tick_of_a_coarse_clock_is_still_found(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer, reader = BlobStore(tmp_path), BlobStore(tmp_path)
    folder = tmp_path / "packs"
    tick = time.time_ns()
    os.utime(folder, ns=(tick, tick))
    reader.packs.refresh()  # a listing within the margin of the folder's last change
    same_tick = _blobs(PACK_MIN_BLOBS, "same tick")
    writer.put_many(same_tick)
    os.utime(folder, ns=(tick, tick))  # the folder's time did not move (a coarse clock)
    assert reader.missing([d for d, _ in same_tick]) == []
    # a listing made long after the folder's last change is not repeated while nothing changes
    old = tick - 10 * RESCAN_MARGIN_NS
    os.utime(folder, ns=(old, old))
    reader.packs.refresh()
    listings: list[str] = []
    real = os.listdir

    def listdir(path: str) -> list[str]:
        listings.append(path)
        return real(path)

    monkeypatch.setattr(os, "listdir", listdir)
    assert reader.missing([hashlib.sha256(b"absent").hexdigest()]) != []
    assert listings == []
