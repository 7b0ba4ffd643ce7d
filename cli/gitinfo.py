"""What git knows about a lab: tracked files, uncommitted changes, untracked files, HEAD.

`sf submit` packs the lab from git so that every run records the commit it came from. The lab
may be a sub-folder of a larger repository: every path returned here is relative to the lab
root, never to the repository root.

`start_early` lets `sf submit` start these git processes before it imports the rest of its code,
so that git walks the lab while Python loads modules; `read_state` then takes them.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
from dataclasses import dataclass
from typing import NoReturn

from cli.errors import CliError, usage

NOT_A_REPO_HINT = "run `git init && git add -A && git commit -m 'first commit'` in the lab"
LAB_FILE = "starforge.yaml"  # cli.lab.LAB_FILE (tests/unit/cli/test_gitinfo.py): cli.lab loads yaml
_started: dict[pathlib.Path, list[subprocess.Popen[bytes]]] = {}  # start_early's, by lab root (at most one)


@dataclass(frozen=True)
class GitState:
    """A snapshot of the lab's git state."""

    commit: str
    branch: str  # "" when detached
    tracked: tuple[str, ...]  # relative to the lab root
    changed: tuple[str, ...]  # "XY path" lines of modified/staged/deleted tracked files
    untracked: tuple[str, ...]  # relative to the lab root, not ignored


_ENV_OVERRIDES = {"GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}
# rev-parse prints the lab's prefix in the repository, HEAD's commit, HEAD's full name ("HEAD" when
# detached) and its short name as `git symbolic-ref --short` gives it; the closing "--" keeps a file
# named HEAD in the lab from making "HEAD" ambiguous, and is echoed back.
_HEAD = ("rev-parse", "--show-prefix", "HEAD", "--symbolic-full-name", "HEAD", "--abbrev-ref=loose", "HEAD", "--")
_TRACKED = ("ls-files", "-z", "--cached", "--recurse-submodules")
_STATUS = ("status", "--porcelain=v1", "-z", "--untracked-files=all", "--", ".")


def _git(root: pathlib.Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    try:
        result = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, env={**os.environ, **_ENV_OVERRIDES}, check=False
        )
    except FileNotFoundError:
        raise usage("git is not installed; sf submit packs the lab from git") from None
    if check:
        _check(root, args, result.returncode, result.stderr)
    return result


def _check(root: pathlib.Path, args: tuple[str, ...], returncode: int, stderr: bytes) -> None:
    if returncode != 0:
        err = stderr.decode(errors="replace").strip().splitlines()
        raise usage(f"git {' '.join(args[:2])} failed in {root}: {err[-1] if err else 'error'}")


def start_early(cwd: pathlib.Path | None = None) -> None:
    """Start `read_state`'s git processes for the lab containing `cwd` (found as `cli.lab.find_lab_root`
    finds it), to run while the caller imports; `read_state` of that lab takes them. Anything that
    goes wrong here is left for `read_state` to meet and report. Processes nobody took are ended
    when the interpreter exits (they only read: GIT_OPTIONAL_LOCKS=0)."""
    if _started:
        return
    try:
        here = (cwd or pathlib.Path.cwd()).resolve()
        root = next((f for f in (here, *here.parents) if (f / LAB_FILE).is_file()), None)
        if root is None:
            return
        _started[root] = _spawn(root, (_HEAD, _TRACKED, _STATUS))
    except (OSError, CliError):
        return
    import atexit

    atexit.register(_end_untaken)


def _end_untaken() -> None:
    for procs in _started.values():
        for proc in procs:
            proc.kill()
            proc.communicate()
    _started.clear()


def _take_started(root: pathlib.Path) -> list[subprocess.Popen[bytes]] | None:
    """The processes `start_early` started for `root` (once), or None."""
    return _started.pop(root, None)


def _spawn(root: pathlib.Path, commands: tuple[tuple[str, ...], ...]) -> list[subprocess.Popen[bytes]]:
    """Start git `commands` at the same time (none depends on another's result)."""
    env = {**os.environ, **_ENV_OVERRIDES}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for args in commands:
            procs.append(
                subprocess.Popen(
                    ["git", "-C", str(root), *args],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=env,
                )
            )
    except FileNotFoundError:
        for proc in procs:
            proc.kill()
            proc.communicate()
        raise usage("git is not installed; sf submit packs the lab from git") from None
    return procs


def _collect(procs: list[subprocess.Popen[bytes]]) -> list[tuple[bytes, bytes, int]]:
    """Each process's stdout, stderr and status, in order."""
    results = []
    for proc in procs:
        out, err = proc.communicate()
        results.append((out, err, proc.returncode))
    return results


def _refuse_head(root: pathlib.Path, stderr: bytes) -> NoReturn:
    """Why the combined rev-parse failed, told as the separate probes always told it."""
    probe = _git(root, "rev-parse", "--show-prefix", check=False)
    if probe.returncode != 0:
        raise usage(
            f"{root} is not a git repository: sf submit packs the lab from git; "
            "run `git init && git add -A && git commit`",
            hint=NOT_A_REPO_HINT,
        )
    head = _git(root, "rev-parse", "--verify", "-q", "HEAD", check=False)
    if head.returncode != 0:
        raise usage(
            "the lab's git repository has no commit yet: sf submit packs the lab from git; "
            "run `git add -A && git commit`",
        )
    _check(root, _HEAD, 1, stderr)
    raise AssertionError("unreachable")


def _parse_head(out: bytes) -> tuple[str, str, str] | None:
    """(prefix, commit, branch) from the combined rev-parse; None when it is not the expected shape."""
    lines = out.split(b"\n")
    if len(lines) < 6 or lines[-2:] != [b"--", b""]:
        return None
    commit, full_name, short_name = (line.decode(errors="replace") for line in lines[-5:-2])
    prefix = b"\n".join(lines[:-5]).decode("utf-8", errors="surrogateescape")  # a folder name may hold a line break
    branch = "" if full_name == "HEAD" else short_name  # "HEAD": detached, where `symbolic-ref` fails
    return prefix, commit, branch


def read_state(root: pathlib.Path) -> GitState:
    """Read the lab's git state; refuse labs that are not (committed) git repositories.

    Three git processes, run at the same time: `rev-parse` (the lab's prefix in the repository,
    HEAD's commit and branch), `ls-files` (the tracked files) and `status` (the changes)."""
    procs = _take_started(root) or _spawn(root, (_HEAD, _TRACKED, _STATUS))
    (head_out, head_err, head_rc), (tracked_out, tracked_err, tracked_rc), (status_out, status_err, status_rc) = (
        _collect(procs)
    )
    if head_rc != 0:
        _refuse_head(root, head_err)
    head = _parse_head(head_out)
    if head is None:
        raise usage(f"git rev-parse failed in {root}: unexpected output {head_out[-200:]!r}")
    prefix, commit, branch = head
    _check(root, _TRACKED, tracked_rc, tracked_err)
    _check(root, _STATUS, status_rc, status_err)
    tracked = _split_z(tracked_out)
    changed: list[str] = []
    untracked: list[str] = []
    tokens = _split_z(status_out)
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
