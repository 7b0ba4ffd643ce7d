"""Packing a lab from git: what is packed, what is refused, and the manifest's stability."""

from __future__ import annotations

import hashlib
import os
import pathlib

import pytest
from starforge_api.job.v1 import workspace_pb2

from cli import globs, pack
from cli.errors import EXIT_USAGE, CliError
from cli.hashcache import HashCache
from cli.lab import LabSettings, find_lab
from common.hashing import sha256_file
from tests.unit.cli.helpers import git, make_lab, write


def _pack(root: pathlib.Path, **kwargs: object) -> pack.Pack:
    lab = find_lab(root)
    return pack.pack_lab(lab.root, lab.settings, **kwargs)  # type: ignore[arg-type]


def _paths(p: pack.Pack) -> list[str]:
    return [f.path for f in p.files]


def _refusal(root: pathlib.Path, **kwargs: object) -> CliError:
    with pytest.raises(CliError) as info:
        _pack(root, **kwargs)
    assert info.value.exit_code == EXIT_USAGE
    return info.value


def test_packs_tracked_files_sorted_with_modes(lab: pathlib.Path) -> None:
    p = _pack(lab)
    assert _paths(p) == [
        ".gitignore",
        "experiments/demo/config.yaml",
        "experiments/demo/recipe.lock.json",
        "experiments/demo/train.sh",
        "src/model.py",
        "starforge.yaml",
    ]
    by_path = {f.path: f for f in p.files}
    assert by_path["experiments/demo/train.sh"].executable
    assert not by_path["src/model.py"].executable
    assert by_path["src/model.py"].sha256 == sha256_file(lab / "src/model.py")
    assert p.manifest.total_bytes == sum(f.size for f in p.files)
    assert [f.path for f in p.manifest.files] == _paths(p)
    assert p.git is not None
    assert len(p.git.commit) == 40
    assert p.git.branch == "main"
    assert not p.dirty
    assert p.untracked == []
    assert p.warnings == []


def test_manifest_digest_is_canonical_and_stable(lab: pathlib.Path) -> None:
    first = _pack(lab, use_cache=False)
    lines = "".join(f"{f.sha256} {'755' if f.executable else '644'} {f.path}\n" for f in first.files)
    assert first.manifest.digest == hashlib.sha256(lines.encode()).hexdigest()
    again = _pack(lab, use_cache=False)
    assert again.manifest.digest == first.manifest.digest
    (lab / "src/model.py").chmod(0o755)
    git(lab, "commit", "-q", "-am", "chmod")
    assert _pack(lab).manifest.digest != first.manifest.digest


def test_the_digest_needs_no_manifest_message_and_matches_it(lab: pathlib.Path) -> None:
    """An unchanged lab is named by its digest alone: `Pack.digest` is the manifest's, made without
    the message (made when first asked for, as it would have been made at once)."""
    p = _pack(lab)
    assert p._manifest is None
    digest = p.digest
    assert p._manifest is None  # still not made
    eager = pack.to_manifest(p.files)
    assert p.manifest == eager and digest == eager.digest == p.digest
    unhashed = _pack(lab, use_cache=False, defer_hashing=True)
    assert unhashed.unhashed and unhashed.digest == "" and unhashed.manifest == workspace_pb2.WorkspaceManifest()
    unhashed.hashed({f.path: sha256_file(lab / f.path) for f in unhashed.unhashed})
    assert unhashed.digest == digest and unhashed.manifest == eager


def test_paths_are_relative_posix_without_dotdot(lab: pathlib.Path) -> None:
    for f in _pack(lab).files:
        assert not f.path.startswith("/")
        assert ".." not in f.path.split("/")
        assert "\\" not in f.path


def test_include_adds_ignored_files_and_exclude_drops_tracked(tmp_path: pathlib.Path) -> None:
    root = make_lab(
        tmp_path / "lab",
        extra_yaml='package:\n  include: ["data/*.jsonl"]\n  exclude: ["src/", "*.md"]\n',
        commit=False,
    )
    write(root / ".gitignore", ".starforge/\ndata/\n")
    write(root / "data/train.jsonl", "{}\n")
    write(root / "data/big.bin", "x")
    write(root / "README.md", "# hi\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    paths = _paths(_pack(root))
    assert "data/train.jsonl" in paths
    assert "data/big.bin" not in paths
    assert "src/model.py" not in paths
    assert "README.md" not in paths


def test_glob_semantics() -> None:
    anywhere = globs.compile_pattern("*.ckpt")
    assert anywhere.matches("a.ckpt")
    assert anywhere.matches("x/y/a.ckpt")
    assert not anywhere.matches("a.ckpt.txt")
    folder = globs.compile_pattern("__pycache__")
    assert folder.matches("pkg/__pycache__/m.pyc")
    anchored = globs.compile_pattern("data/*.jsonl")
    assert anchored.matches("data/a.jsonl")
    assert not anchored.matches("x/data/a.jsonl")
    assert not anchored.matches("data/sub/a.jsonl")
    deep = globs.compile_pattern("data/**/*.parquet")
    assert deep.matches("data/a.parquet")
    assert deep.matches("data/x/y/a.parquet")
    assert globs.compile_pattern("checkpoints/").matches("checkpoints/step1/model.pt")
    assert globs.compile_pattern("/notes.md").matches("notes.md")
    assert not globs.compile_pattern("/notes.md").matches("x/notes.md")
    assert globs.compile_pattern("file[0-9].txt").matches("file3.txt")


def test_sensitive_files_are_refused_by_name(lab: pathlib.Path) -> None:
    for name in (
        ".env",
        "config/.env.prod",
        "certs/server.pem",
        "keys/api.key",
        "id_rsa",
        "deploy/id_ed25519",
        ".aws/credentials",
        "gcp/credentials.json",
        ".netrc",
        "store.p12",
        ".docker/config.json",
    ):
        write(lab / name, "secret\n")
    write(lab / ".env.example", "KEY=\n")
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "oops")
    err = _refusal(lab)
    assert "refusing to pack 11 sensitive file(s)" in err.message
    for name in (".env", "config/.env.prod", "certs/server.pem", "id_rsa", ".aws/credentials", ".netrc"):
        assert name in err.message
    assert ".env.example" not in err.message
    assert "package.exclude" in (err.hint or "")
    assert any(d.startswith(".env (") for d in err.details)


def test_sensitive_file_can_be_excluded(tmp_path: pathlib.Path) -> None:
    root = make_lab(tmp_path / "lab", extra_yaml='package:\n  exclude: [".env"]\n')
    write(root / ".env", "SECRET=1\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "env")
    assert ".env" not in _paths(_pack(root))


def test_npmrc_only_with_a_token(lab: pathlib.Path) -> None:
    write(lab / ".npmrc", "registry=https://registry.example/\n")
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "npmrc")
    assert ".npmrc" in _paths(_pack(lab))
    write(lab / ".npmrc", "//registry.example/:_authToken=abc\n")
    git(lab, "commit", "-q", "-am", "token")
    assert ".npmrc" in _refusal(lab).message


def test_dirty_tree_is_refused_unless_allowed(lab: pathlib.Path) -> None:
    write(lab / "src/model.py", "print('changed')\n")
    err = _refusal(lab)
    assert "uncommitted change" in err.message
    assert any("src/model.py" in d for d in err.details)
    assert "--allow-dirty" in (err.hint or "")
    p = _pack(lab, allow_dirty=True)
    assert p.dirty
    by_path = {f.path: f for f in p.files}
    assert by_path["src/model.py"].sha256 == sha256_file(lab / "src/model.py")


def test_staged_change_is_dirty_too(lab: pathlib.Path) -> None:
    write(lab / "new.py", "x = 1\n")
    git(lab, "add", "new.py")
    assert "uncommitted" in _refusal(lab).message


def test_untracked_files_are_listed_and_recorded(lab: pathlib.Path) -> None:
    write(lab / "notes.txt", "todo\n")
    write(lab / "scratch/tmp.py", "x\n")
    p = _pack(lab)
    assert "notes.txt" not in _paths(p)
    assert p.untracked == ["notes.txt", "scratch/tmp.py"]
    assert len(p.warnings) == 1
    assert "2 untracked file(s) not packed: notes.txt, scratch/tmp.py" in p.warnings[0]
    assert not p.dirty


def test_hash_cache_dir_is_never_packed_or_reported(lab: pathlib.Path) -> None:
    (lab / ".gitignore").unlink()
    git(lab, "commit", "-q", "-am", "no ignore")
    _pack(lab)  # writes .starforge/cache
    p = _pack(lab)
    assert not any(f.path.startswith(".starforge") for f in p.files)
    assert not any(u.startswith(".starforge") for u in p.untracked)


def test_symlink_outside_the_lab_is_refused(lab: pathlib.Path, tmp_path: pathlib.Path) -> None:
    outside = write(tmp_path / "outside.txt", "secret\n")
    os.symlink(outside, lab / "link.txt")
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "link")
    err = _refusal(lab)
    assert "symlink" in err.message
    assert any(d.startswith("link.txt -> ") and "outside the lab" in d for d in err.details)


def test_symlink_inside_the_lab_is_packed_as_its_target(lab: pathlib.Path) -> None:
    os.symlink("src/model.py", lab / "model_link.py")
    os.symlink("src", lab / "src_link")
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "links")
    by_path = {f.path: f for f in _pack(lab).files}
    assert by_path["model_link.py"].sha256 == by_path["src/model.py"].sha256
    assert by_path["src_link/model.py"].sha256 == by_path["src/model.py"].sha256


def test_broken_symlink_is_refused(lab: pathlib.Path) -> None:
    os.symlink("does-not-exist", lab / "dangling")
    git(lab, "add", "-A")
    git(lab, "commit", "-q", "-m", "dangling")
    assert any("broken link" in d for d in _refusal(lab).details)


def test_not_a_git_repo(tmp_path: pathlib.Path) -> None:
    write(tmp_path / "starforge.yaml", 'project: "@alice/lab"\n')
    err = _refusal(tmp_path)
    assert "not a git repository" in err.message
    assert "git init && git add -A && git commit" in err.message


def test_repo_without_commit(tmp_path: pathlib.Path) -> None:
    root = make_lab(tmp_path / "lab", commit=False)
    assert "no commit yet" in _refusal(root).message


def test_lab_in_a_subfolder_of_the_repo(tmp_path: pathlib.Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    write(repo / "other/file.txt", "not in the lab\n")
    root = make_lab(repo / "labs/mine", commit=False)
    (root / ".git").rename(repo / ".git")  # one repository for the whole tree
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    p = _pack(root)
    assert "starforge.yaml" in _paths(p)
    assert not any("other" in x for x in _paths(p))
    write(repo / "other/file.txt", "changed outside the lab\n")
    assert not _pack(root).dirty  # changes outside the lab do not matter
    write(root / "src/model.py", "changed\n")
    assert "src/model.py" in "".join(_refusal(root).details)


def test_hash_cache_is_reused(lab: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = 1_600_000_000_000_000_000  # old mtimes: outside the racy window
    for path in lab.rglob("*"):
        if path.is_file() and ".git" not in path.parts:
            os.utime(path, ns=(old, old))
    calls: list[pathlib.Path] = []

    def counting(path: pathlib.Path) -> str:
        calls.append(path)
        return sha256_file(path)

    def cache_for(root: pathlib.Path) -> HashCache:
        return HashCache(root / pack.CACHE_FILE, hasher=counting)

    settings = LabSettings(project="@alice/lab")
    first = pack.pack_lab(lab, settings, cache=cache_for(lab))
    assert len(calls) == len(first.files)
    assert (lab / pack.CACHE_FILE).exists()
    calls.clear()
    second = pack.pack_lab(lab, settings, cache=cache_for(lab))
    assert calls == []
    assert second.cache_hits == len(second.files)
    assert second.manifest.digest == first.manifest.digest
    write(lab / "src/model.py", "print('changed!')\n")  # new size and mtime: rehashed
    git(lab, "commit", "-q", "-am", "change")
    third = pack.pack_lab(lab, settings, cache=cache_for(lab))
    assert [p.name for p in calls] == ["model.py"]
    assert third.manifest.digest != first.manifest.digest


def test_corrupt_cache_is_ignored(lab: pathlib.Path) -> None:
    write(lab / pack.CACHE_FILE, "{not json")
    assert _pack(lab).files


def test_pack_directory_for_datasets(tmp_path: pathlib.Path) -> None:
    folder = tmp_path / "data"
    write(folder / "train.jsonl", "{}\n")
    write(folder / "sub/val.jsonl", "{}\n")
    p = pack.pack_directory(folder)
    assert _paths(p) == ["sub/val.jsonl", "train.jsonl"]
    write(folder / ".env", "X=1\n")
    with pytest.raises(CliError, match="sensitive"):
        pack.pack_directory(folder)


def test_path_problems() -> None:
    assert pack.path_problem("a/b.txt") is None
    assert pack.path_problem("/etc/passwd") == "absolute path"
    assert pack.path_problem("a/../b") is not None
    assert pack.path_problem("a\nb") is not None
