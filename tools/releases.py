"""Released versions (deploy/releases.txt) and their source trees, for upgrade tests.

deploy/releases.txt lists `<tag> <commit> <alembic head>` per release, oldest first. The git tag is
the source of truth; the file is the fallback where a clone has no tags (CI clones often have none),
and it names the release's last migration so that the expand/contract check needs no git at all.

A release's tree is extracted with `git archive` (any clone with the commit's objects can do it)
and run in its own virtual environment layered on this one's site-packages: releases before wheels
(v0.1.0) import their generated code as a top-level `starforge` package from gen/python, so the old
tree's roots go first on that venv's path (a .pth file), as bench/ab.py puts them first on
PYTHONPATH. Third-party packages (grpcio, SQLAlchemy, ...) are the dev venv's.
"""

from __future__ import annotations

import dataclasses
import pathlib
import subprocess
import sys
import sysconfig

REPO = pathlib.Path(__file__).resolve().parents[1]
RELEASES = REPO / "deploy" / "releases.txt"


@dataclasses.dataclass(frozen=True)
class Release:
    tag: str
    commit: str
    alembic_head: str


def releases(path: pathlib.Path = RELEASES) -> list[Release]:
    out: list[Release] = []
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 3:
            raise ValueError(f"{path}:{n}: want `<tag> <commit> <alembic head>`, got {raw!r}")
        out.append(Release(*parts))
    if not out:
        raise ValueError(f"{path}: no release listed")
    return out


def last_release() -> Release:
    return releases()[-1]


def resolve_commit(release: Release) -> str:
    """The release's commit: its tag where the clone has it (and it must agree with the file),
    else the commit the file records."""
    tag = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"refs/tags/{release.tag}^{{commit}}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if tag.returncode == 0:
        sha = tag.stdout.strip()
        if sha != release.commit:
            raise ValueError(f"tag {release.tag} is {sha}, but {RELEASES.name} says {release.commit}")
        return sha
    return release.commit


def extract(release: Release, dest: pathlib.Path) -> pathlib.Path:
    """The release's tree under `dest` (git archive | tar)."""
    commit = resolve_commit(release)
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", "--format=tar", commit], cwd=REPO, capture_output=True, check=False)
    if archive.returncode != 0:
        raise RuntimeError(
            f"git archive {commit} ({release.tag}) failed; the clone lacks the release's commit "
            f"(fetch it or the tag): {archive.stderr.decode(errors='replace')}"
        )
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest


def layered_venv(tree: pathlib.Path, venv: pathlib.Path) -> pathlib.Path:
    """A venv whose path is `tree` (and its generated code) first, then this interpreter's
    site-packages; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = pathlib.Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    roots = [tree, tree / "gen" / "python", tree / "gen" / "pure"]
    # .pth files run in name order: the release's roots first, then the dev venv's packages.
    (site / "00_starforge_release.pth").write_text("".join(f"{p}\n" for p in roots))
    dev_site = sysconfig.get_paths()["purelib"]
    (site / "zz_dev_site.pth").write_text(f"import site; site.addsitedir({dev_site!r})\n")
    return python
