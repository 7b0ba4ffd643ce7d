"""`cli.gitinfo.read_state` on real git repositories: the same state the five separate git
processes it replaced gave (`_five_processes` below is that code, kept as the reference)."""

from __future__ import annotations

import os
import pathlib
import subprocess

import pytest

from cli import gitinfo
from cli.errors import CliError
from cli.gitinfo import GitState, read_state
from tests.unit.cli.helpers import git, make_lab, write


def _old_git(root: pathlib.Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, env=env, check=False)


def _five_processes(root: pathlib.Path) -> GitState | str:
    """What read_state returned before it ran three processes (a refusal as its message's start)."""
    probe = _old_git(root, "rev-parse", "--show-prefix")
    if probe.returncode != 0:
        return "not a repo"
    prefix = probe.stdout.decode().strip()
    head = _old_git(root, "rev-parse", "--verify", "-q", "HEAD")
    if head.returncode != 0:
        return "no commit"
    branch_run = _old_git(root, "symbolic-ref", "-q", "--short", "HEAD")
    branch = branch_run.stdout.decode().strip() if branch_run.returncode == 0 else ""
    tracked = gitinfo._split_z(_old_git(root, "ls-files", "-z", "--cached", "--recurse-submodules").stdout)
    tokens = gitinfo._split_z(
        _old_git(root, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--", ".").stdout
    )
    changed: list[str] = []
    untracked: list[str] = []
    i = 0
    while i < len(tokens):
        entry = tokens[i]
        i += 1
        xy, path = entry[:2], entry[3:]
        if xy[0] in "RC":
            i += 1
        rel = gitinfo._strip_prefix(path, prefix)
        if rel is None:
            continue
        if xy == "??":
            untracked.append(rel)
        elif xy != "!!":
            changed.append(f"{xy.strip() or xy} {rel}")
    return GitState(head.stdout.decode().strip(), branch, tuple(tracked), tuple(changed), tuple(sorted(untracked)))


def _state(root: pathlib.Path) -> GitState | str:
    try:
        return read_state(root)
    except CliError as err:
        if "not a git repository" in err.message:
            return "not a repo"
        if "no commit yet" in err.message:
            return "no commit"
        raise


def _same(root: pathlib.Path) -> GitState:
    new = _state(root)
    assert new == _five_processes(root)
    assert isinstance(new, GitState)
    return new


def _commit(root: pathlib.Path, message: str = "more") -> None:
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", message)


def test_clean_lab_on_a_branch(lab: pathlib.Path) -> None:
    state = _same(lab)
    assert state.branch == "main"
    assert state.commit == git(lab, "rev-parse", "HEAD").strip()
    assert "src/model.py" in state.tracked
    assert (state.changed, state.untracked) == ((), ())


def test_three_git_processes(lab: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[list[str]] = []
    real = subprocess.Popen

    def counting(args: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        started.append(args)
        return real(args, **kwargs)  # type: ignore[call-overload,no-any-return]

    monkeypatch.setattr(subprocess, "Popen", counting)
    read_state(lab)
    assert [a[3] for a in started] == ["rev-parse", "ls-files", "status"]


def test_processes_started_early_are_taken_once_by_the_same_lab(
    lab: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`start_early` (before `sf submit` imports its flow) starts the same three processes, from a
    folder inside the lab; `read_state` of that lab takes them and reads the same state as without."""
    from cli import lab as labmod

    assert gitinfo.LAB_FILE == labmod.LAB_FILE
    expected = read_state(lab)
    started: list[list[str]] = []
    real = subprocess.Popen

    def counting(args: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        started.append(args)
        return real(args, **kwargs)  # type: ignore[call-overload,no-any-return]

    monkeypatch.setattr(subprocess, "Popen", counting)
    gitinfo.start_early(lab / "src")  # a folder inside the lab: the lab's root
    gitinfo.start_early(lab / "src")  # a second call starts nothing more
    assert [a[3] for a in started] == ["rev-parse", "ls-files", "status"]
    assert [a[2] for a in started] == [str(lab.resolve())] * 3
    assert read_state(lab) == expected and len(started) == 3  # taken: no new process
    assert read_state(lab) == expected and len(started) == 6  # taken once only


def test_processes_started_early_and_not_taken_are_ended(lab: pathlib.Path, tmp_path: pathlib.Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    gitinfo.start_early(outside)  # no lab: nothing started
    assert not gitinfo._started
    gitinfo.start_early(lab)
    procs = gitinfo._started[lab.resolve()]
    assert gitinfo._take_started(outside) is None and gitinfo._started  # another root's
    gitinfo._end_untaken()  # what atexit runs
    assert not gitinfo._started and all(p.returncode is not None for p in procs)


def test_dirty_lab(lab: pathlib.Path) -> None:
    write(lab / "src/model.py", "changed\n")  # modified
    write(lab / "src/staged.py", "new\n")
    git(lab, "add", "src/staged.py")  # added
    (lab / "experiments/demo/config.yaml").unlink()  # deleted
    git(lab, "mv", "experiments/demo/train.sh", "experiments/demo/run.sh")  # renamed
    write(lab / "notes/untracked.txt", "u\n")
    write(lab / ".gitignore", ".starforge/\n*.log\n")
    write(lab / "ignored.log", "ignored\n")
    state = _same(lab)
    assert " M src/model.py" not in state.changed and "M src/model.py" in state.changed
    assert "A src/staged.py" in state.changed
    assert any(c.endswith("experiments/demo/run.sh") for c in state.changed)
    assert state.untracked == ("notes/untracked.txt",)


def test_detached_head(lab: pathlib.Path) -> None:
    write(lab / "src/more.py", "x\n")
    _commit(lab)
    git(lab, "checkout", "-q", "--detach", "HEAD~1")
    state = _same(lab)
    assert state.branch == ""
    assert state.commit == git(lab, "rev-parse", "HEAD").strip()


def test_branch_named_like_a_tag_and_a_file_named_head(lab: pathlib.Path) -> None:
    git(lab, "checkout", "-q", "-b", "feature/x")
    git(lab, "tag", "feature/x")
    write(lab / "HEAD", "a file named HEAD\n")
    _commit(lab)
    state = _same(lab)
    assert state.branch == "heads/feature/x"  # as `git symbolic-ref --short` disambiguates it
    assert "HEAD" in state.tracked


def test_repo_without_commit_and_no_repo(tmp_path: pathlib.Path) -> None:
    assert _state(make_lab(tmp_path / "lab", commit=False)) == "no commit" == _five_processes(tmp_path / "lab")
    write(tmp_path / "plain/starforge.yaml", "name: x\n")
    assert _state(tmp_path / "plain") == "not a repo" == _five_processes(tmp_path / "plain")


@pytest.mark.parametrize("folder", ["labs/mine", "labs/with space/ünï", "labs/line\nbreak"])
def test_lab_in_a_subfolder(tmp_path: pathlib.Path, folder: str) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    write(repo / "other/file.txt", "not in the lab\n")
    root = make_lab(repo / folder, commit=False)
    (root / ".git").rename(repo / ".git")
    _commit(repo, "init")
    assert _same(root).tracked == tuple(sorted(git(root, "ls-files").split()))  # lab-relative
    write(repo / "other/file.txt", "changed outside the lab\n")
    write(repo / "other/new.txt", "untracked outside the lab\n")
    write(root / "src/model.py", "changed\n")
    write(root / "src/new.py", "untracked\n")
    state = _same(root)
    assert state.changed == ("M src/model.py",)
    assert state.untracked == ("src/new.py",)


def test_odd_file_names(lab: pathlib.Path) -> None:
    names = ["with space.py", "line\nbreak.txt", "ünïcödé/文件.py", 'quote"d.txt', "tab\tname"]
    for name in names:
        write(lab / name, "x\n")
    _commit(lab)
    state = _same(lab)
    assert set(names) <= set(state.tracked)
    for name in names:
        write(lab / name, "changed\n")
        write(lab / f"new {name}", "untracked\n")
    state = _same(lab)
    assert {c.split(" ", 1)[1] for c in state.changed} == set(names)
    assert set(state.untracked) == {f"new {n}" for n in names}


def test_submodule_files_are_tracked(tmp_path: pathlib.Path) -> None:
    sub = make_lab(tmp_path / "sub")
    lab = make_lab(tmp_path / "lab")
    git(lab, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "vendor/sub")
    _commit(lab, "submodule")
    state = _same(lab)
    assert "vendor/sub/src/model.py" in state.tracked
    write(lab / "vendor/sub/src/model.py", "changed in the submodule\n")
    assert _same(lab).changed == ("M vendor/sub",)
