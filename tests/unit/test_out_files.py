"""`executor_svc/out_files.py` on a real file system: the rules for reading a FORGE_OUT_DIR that
a job wrote (links never followed, only regular files opened, bounded and paged listings)."""

from __future__ import annotations

import hashlib
import os
import pathlib

import pytest

from common import errors
from common.artifact_paths import split_path
from executor_svc import out_files


def _tree(root: pathlib.Path) -> pathlib.Path:
    (root / "ckpt" / "step-1").mkdir(parents=True)
    (root / "ckpt" / "step-1" / "model.bin").write_bytes(b"m" * 2500)
    (root / "eval.json").write_text("{}")
    (root / "a.txt").write_text("a")
    outside = root.parent / "outside"
    outside.mkdir()
    (outside / "secret").write_text("secret")
    (root / "to-outside").symlink_to(outside)
    (root / "secret-link").symlink_to(outside / "secret")
    os.mkfifo(root / "fifo")
    return outside


def test_listing_pages_files_and_links_never_following(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "out"
    root.mkdir()
    _tree(root)
    lister = out_files.Lister()
    seen: list[out_files.Entry] = []
    token = ""
    pages = 0
    while True:
        page = lister.page(root, 2, token)
        pages += 1
        seen.extend(page.entries)
        token = page.next_page_token
        if not token:
            break
    assert pages == 3
    by_path = {e.path: e for e in seen}
    assert list(by_path) == ["a.txt", "ckpt/step-1/model.bin", "eval.json", "secret-link", "to-outside"]
    model = by_path["ckpt/step-1/model.bin"]
    assert (model.size, model.sha256, model.link_target) == (2500, hashlib.sha256(b"m" * 2500).hexdigest(), None)
    assert by_path["to-outside"].link_target == str(tmp_path / "outside")
    assert (by_path["secret-link"].size, by_path["secret-link"].sha256) == (0, "")


def test_open_file_refuses_links_dirs_fifos_and_missing(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "out"
    root.mkdir()
    _tree(root)
    fd = out_files.open_file(root, "ckpt/step-1/model.bin")
    os.close(fd)
    for path in ("secret-link", "to-outside/secret", "ckpt", "fifo"):
        with pytest.raises(errors.FailedPrecondition):
            out_files.open_file(root, path)
    with pytest.raises(errors.NotFound):
        out_files.open_file(root, "nope")
    for bad in ("../outside/secret", "/etc/passwd", "a//b", "./a.txt", "", "x\x00y", "a/" * 70 + "b"):
        with pytest.raises(errors.InvalidArgument):
            out_files.open_file(root, bad)


def test_an_out_dir_that_is_a_link_is_not_followed(tmp_path: pathlib.Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "f").write_text("x")
    (tmp_path / "out").symlink_to(real)
    with pytest.raises(errors.FailedPrecondition):
        out_files.Lister().page(tmp_path / "out", 0, "")
    with pytest.raises(errors.FailedPrecondition):
        out_files.open_file(tmp_path / "out", "f")
    with pytest.raises(errors.NotFound):
        out_files.Lister().page(tmp_path / "missing", 0, "")


def test_read_chunks_from_an_offset(tmp_path: pathlib.Path) -> None:
    (tmp_path / "f").write_bytes(bytes(range(256)) * 10)
    fd = out_files.open_file(tmp_path, "f")
    try:
        chunks = list(out_files.read_chunks(fd, 1000, chunk=700))
        assert [(o, len(d), s) for o, d, s in chunks] == [(1000, 700, 2560), (1700, 700, 2560), (2400, 160, 2560)]
        assert b"".join(d for _, d, _ in chunks) == (bytes(range(256)) * 10)[1000:]
        assert list(out_files.read_chunks(fd, 2560)) == [(2560, b"", 2560)]
        with pytest.raises(errors.InvalidArgument):
            list(out_files.read_chunks(fd, 2561))
    finally:
        os.close(fd)


def test_digest_follows_a_rewrite_of_the_same_size(tmp_path: pathlib.Path) -> None:
    (tmp_path / "f").write_bytes(b"1111")
    lister = out_files.Lister()
    first = lister.page(tmp_path, 0, "").entries[0].sha256
    (tmp_path / "f").write_bytes(b"2222")
    os.utime(tmp_path / "f", ns=(0, 0))  # the job can set mtime back, never ctime
    assert lister.page(tmp_path, 0, "").entries[0].sha256 == hashlib.sha256(b"2222").hexdigest() != first


def test_bounds(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(5):
        (tmp_path / f"f{i}").write_text("x")
    os.mkdir(tmp_path / "bad")
    open(os.path.join(os.fsencode(tmp_path / "bad"), b"\xff\xfe"), "w").close()  # not UTF-8: left out
    assert [e.path for e in out_files.Lister().page(tmp_path, 0, "").entries] == [f"f{i}" for i in range(5)]
    for size in (-1, 1001):
        with pytest.raises(errors.InvalidArgument):
            out_files.Lister().page(tmp_path, size, "")
    with pytest.raises(errors.InvalidArgument):
        out_files.Lister().page(tmp_path, 0, "../x")
    monkeypatch.setattr(out_files, "MAX_ENTRIES", 3)
    with pytest.raises(errors.FailedPrecondition):
        out_files.Lister().page(tmp_path, 0, "")
    # empty directories count too: a job cannot make the walk endless with them
    only_dirs = tmp_path / "dirs"
    only_dirs.mkdir()
    for i in range(4):
        (only_dirs / f"d{i}").mkdir()
    with pytest.raises(errors.FailedPrecondition):
        out_files.Lister().page(only_dirs, 0, "")


def test_split_path() -> None:
    assert split_path("a/b.c") == ["a", "b.c"]
    assert split_path("..a/b..") == ["..a", "b.."]
    with pytest.raises(errors.InvalidArgument):
        split_path("x" * 4097)


def test_a_page_of_long_names_stays_small(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    long_dir = tmp_path / ("d" * 200) / ("e" * 200)
    long_dir.mkdir(parents=True)
    for i in range(40):
        (long_dir / f"{i:03d}{'f' * 200}").write_text("x")
    budget = 10_000
    monkeypatch.setattr(out_files, "PAGE_TEXT_BYTES", budget)
    lister = out_files.Lister()
    token, total, pages = "", 0, 0
    while True:
        page = lister.page(tmp_path, 1000, token)
        pages += 1
        total += len(page.entries)
        assert sum(len(e.path) + 200 for e in page.entries) <= budget
        token = page.next_page_token
        if not token:
            break
    assert total == 40 and pages > 1
