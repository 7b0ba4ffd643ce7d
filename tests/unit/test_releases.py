"""deploy/releases.txt: the release list the upgrade test and the expand-only check read."""

from __future__ import annotations

import pathlib
import subprocess

import pytest

from tools import releases


def test_the_listed_releases_are_well_formed_and_the_last_one_is_known_to_git() -> None:
    listed = releases.releases()
    assert len({r.tag for r in listed}) == len(listed), "a tag is listed twice"
    for r in listed:
        assert r.tag.startswith("v") and len(r.commit) == 40 and r.alembic_head.isdigit(), r
    last = releases.last_release()
    commit = releases.resolve_commit(last)
    kind = subprocess.run(
        ["git", "cat-file", "-t", commit], cwd=releases.REPO, capture_output=True, text=True, check=False
    )
    assert kind.stdout.strip() == "commit", f"this clone lacks {last.tag} ({commit}); fetch it"
    # the release's tree has the migration the file names as its head, and none after it
    tree = subprocess.run(
        ["git", "ls-tree", "--name-only", commit, "control/db/migrations/versions/"],
        cwd=releases.REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    numbers = sorted(pathlib.Path(p).name.split("_", 1)[0] for p in tree if pathlib.Path(p).name[0].isdigit())
    assert numbers[-1] == last.alembic_head


def test_a_missing_tag_falls_back_to_the_recorded_commit() -> None:
    r = releases.Release("v0.0.0-no-such-tag", "0" * 40, "0001")
    assert releases.resolve_commit(r) == "0" * 40


@pytest.mark.parametrize("line", ["v1.0.0", "v1.0.0 abc", "v1.0.0 abc 0001 extra"])
def test_a_malformed_line_is_refused_with_its_place(tmp_path: pathlib.Path, line: str) -> None:
    path = tmp_path / "releases.txt"
    path.write_text(f"# header\n{line}\n")
    with pytest.raises(ValueError, match=r"releases.txt:2: want `<tag> <commit> <alembic head>`"):
        releases.releases(path)


def test_an_empty_list_is_refused(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "releases.txt"
    path.write_text("# nothing yet\n")
    with pytest.raises(ValueError, match="no release listed"):
        releases.releases(path)
