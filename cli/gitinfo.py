"""What git knows about a lab: tracked files, uncommitted changes, untracked files, HEAD.

`sf submit` packs the lab from git so that every run records the commit it came from. The lab
may be a sub-folder of a larger repository: every path returned here is relative to the lab
root, never to the repository root.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
from dataclasses import dataclass

from cli.errors import usage

NOT_A_REPO_HINT = "run `git init && git add -A && git commit -m 'first commit'` in the lab"


@dataclass(frozen=True)
class GitState:
    """A snapshot of the lab's git state."""

    commit: str
    branch: str  # "" when detached
    tracked: tuple[str, ...]  # relative to the lab root
    changed: tuple[str, ...]  # "XY path" lines of modified/staged/deleted tracked files
    untracked: tuple[str, ...]  # relative to the lab root, not ignored


def _git(root: pathlib.Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}
    try:
        result = subprocess.run(["git", "-C", str(root), *args], capture_output=True, env=env, check=False)
    except FileNotFoundError:
        raise usage("git is not installed; sf submit packs the lab from git") from None
    if check and result.returncode != 0:
        err = result.stderr.decode(errors="replace").strip().splitlines()
        raise usage(f"git {' '.join(args[:2])} failed in {root}: {err[-1] if err else 'error'}")
    return result


def read_state(root: pathlib.Path) -> GitState:
    """Read the lab's git state; refuse labs that are not (committed) git repositories."""
    probe = _git(root, "rev-parse", "--show-prefix", check=False)
    if probe.returncode != 0:
        raise usage(
            f"{root} is not a git repository: sf submit packs the lab from git; "
            "run `git init && git add -A && git commit`",
            hint=NOT_A_REPO_HINT,
        )
    prefix = probe.stdout.decode().strip()
    head = _git(root, "rev-parse", "--verify", "-q", "HEAD", check=False)
    if head.returncode != 0:
        raise usage(
            "the lab's git repository has no commit yet: sf submit packs the lab from git; "
            "run `git add -A && git commit`",
        )
    commit = head.stdout.decode().strip()
    branch_run = _git(root, "symbolic-ref", "-q", "--short", "HEAD", check=False)
    branch = branch_run.stdout.decode().strip() if branch_run.returncode == 0 else ""
    tracked = _split_z(_git(root, "ls-files", "-z", "--cached", "--recurse-submodules").stdout)
    status = _git(root, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--", ".").stdout
    changed: list[str] = []
    untracked: list[str] = []
    tokens = _split_z(status)
    i = 0
    while i < len(tokens):
        entry = tokens[i]
        i += 1
        xy, path = entry[:2], entry[3:]
        if xy[0] in "RC":
            i += 1  # the rename/copy source follows as its own token
        rel = _strip_prefix(path, prefix)
        if rel is None:
            continue
        if xy == "??":
            untracked.append(rel)
        elif xy != "!!":
            changed.append(f"{xy.strip() or xy} {rel}")
    return GitState(
        commit=commit,
        branch=branch,
        tracked=tuple(tracked),
        changed=tuple(changed),
        untracked=tuple(sorted(untracked)),
    )


def _split_z(raw: bytes) -> list[str]:
    return [p for p in raw.decode("utf-8", errors="surrogateescape").split("\0") if p]


def _strip_prefix(path: str, prefix: str) -> str | None:
    """Porcelain paths are relative to the repository root; make them lab-relative."""
    if not prefix:
        return path
    return path[len(prefix) :] if path.startswith(prefix) else None
