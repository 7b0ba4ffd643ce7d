"""Packing: turn a lab (or a dataset folder) into a content-addressed workspace manifest.

What is packed: the files git tracks (`git ls-files`), plus files matching starforge.yaml
`package.include`, minus `package.exclude`. Each file gets its sha256, size and executable bit;
paths are relative, '/'-separated, never absolute, never with '..', and sorted. The manifest
digest is sha256 over one "<sha256> <755|644> <path>\\n" line per file, so the same tree always
has the same digest. Refusals (dirty tree, sensitive files, symlinks leaving the lab, odd paths)
are usage errors listing every offending file at once, so one fix-and-retry is enough.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from starforge_api.job.v1 import workspace_pb2

from cli import globs
from cli.errors import usage
from cli.gitinfo import GitState, read_state
from cli.hashcache import HashCache
from cli.lab import LabSettings
from common import sensitive
from common.hashing import MAX_BLOB_BYTES

STATE_DIR = ".starforge"  # per-lab client state (hash cache), gitignored by `sf init`
CACHE_FILE = f"{STATE_DIR}/cache/hashes.json"
ADMITTED_FILE = f"{STATE_DIR}/cache/admitted.json"  # the manifest digest each console last admitted
ALWAYS_SKIPPED = (".git", STATE_DIR)
MAX_LISTED = 20
MAX_UNTRACKED_RECORDED = 1000
_MAX_LINK_DEPTH = 8


@dataclass(frozen=True)
class PackedFile:
    """One file of a workspace: where it is on disk and what it hashes to."""

    path: str
    real: str | pathlib.Path  # a plain string for most files: one pathlib object per file was a cost
    sha256: str  # "" while not hashed yet (pack_lab's defer_hashing)
    size: int
    executable: bool
    stat: os.stat_result | None = field(default=None, compare=False, repr=False)  # what was hashed

    @property
    def mode(self) -> str:
        return "755" if self.executable else "644"


@dataclass
class Pack:
    """The result of packing: files, manifest, and what the user should be told.

    `_manifest` None: the manifest message is made from `files` when first asked for. For the
    packaging row's lab that is 10,000 messages (~25 ms of CPU), which an unchanged lab submitted
    by its manifest digest never needs: it asks only for `digest`."""

    files: list[PackedFile]
    _manifest: workspace_pb2.WorkspaceManifest | None
    git: GitState | None = None
    dirty: bool = False
    untracked: list[str] = field(default_factory=list)  # untracked files that were not packed
    warnings: list[str] = field(default_factory=list)
    cache_hits: int = 0
    cache: HashCache | None = field(default=None, repr=False)
    _digest: str | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def manifest(self) -> workspace_pb2.WorkspaceManifest:
        """The manifest message (empty while files are unhashed, as pack_lab's defer_hashing left it)."""
        if self._manifest is None:
            self._manifest = to_manifest(self.files)
        return self._manifest

    @manifest.setter
    def manifest(self, value: workspace_pb2.WorkspaceManifest) -> None:
        self._manifest, self._digest = value, None

    @property
    def digest(self) -> str:
        """The manifest's digest (`manifest.digest`), without making the message when it is not made."""
        if self._manifest is not None:
            return self._manifest.digest
        if self._digest is None:
            self._digest = manifest_digest(self.files)
        return self._digest

    @property
    def unhashed(self) -> list[PackedFile]:
        """Files whose digest the hash cache did not know (packed with defer_hashing)."""
        return [f for f in self.files if not f.sha256]

    def hashed(self, digests: dict[str, str]) -> None:
        """Fill in the digests computed after packing (path -> sha256, for every unhashed file):
        the files, the manifest, and the hash cache on disk."""
        self.files = [
            f if f.sha256 else PackedFile(f.path, f.real, digests[f.path], f.size, f.executable, f.stat)
            for f in self.files
        ]  # not dataclasses.replace: it costs ~20 us a file, and a first submit has 10,000
        if self.cache is not None:
            for f in self.files:
                if f.path in digests and f.stat is not None:
                    self.cache.add(f.path, f.stat, f.sha256)
            self.cache.save()
        self.manifest = to_manifest(self.files)


def manifest_digest(files: Iterable[PackedFile]) -> str:
    """sha256 over the canonical lines "<sha256> <mode> <path>\\n" of files sorted by path."""
    h = hashlib.sha256()
    for f in sorted(files, key=lambda f: f.path):
        h.update(f"{f.sha256} {f.mode} {f.path}\n".encode())
    return h.hexdigest()


def to_manifest(files: list[PackedFile]) -> workspace_pb2.WorkspaceManifest:
    ordered = sorted(files, key=lambda f: f.path)
    return workspace_pb2.WorkspaceManifest(
        files=[
            workspace_pb2.WorkspaceFile(path=f.path, sha256=f.sha256, size=f.size, executable=f.executable)
            for f in ordered
        ],
        digest=manifest_digest(ordered),
        total_bytes=sum(f.size for f in ordered),
    )


# Anything path_problem could object to: most paths do not match, and are fine with one search.
_ODD_PATH = re.compile(r"^/|[\n\r\0]|(?:^|/)\.{0,2}(?:/|$)")


def path_problem(rel: str) -> str | None:
    """Why `rel` cannot be a workspace path, or None when it is fine."""
    if _ODD_PATH.search(rel) is None:
        return None
    if not rel:
        return "empty path"
    if rel.startswith("/"):
        return "absolute path"
    if "\n" in rel or "\r" in rel or "\0" in rel:
        return "file name contains a line break"
    if any(part in ("", ".", "..") for part in rel.split("/")):
        return "path with '.', '..' or an empty segment"
    return None


def _listing(items: list[str]) -> list[str]:
    shown = items[:MAX_LISTED]
    if len(items) > MAX_LISTED:
        shown.append(f"… and {len(items) - MAX_LISTED} more")
    return shown


def _skipped(rel: str) -> bool:
    first = rel.split("/", 1)[0]
    return first in ALWAYS_SKIPPED or "/.git/" in f"/{rel}"


def _walk_files(root: pathlib.Path, start: pathlib.Path) -> Iterator[str]:
    """Lab-relative paths of files and symlinks under `start` (not following folder links)."""
    if not start.is_dir():
        return
    for dirpath, dirnames, filenames in os.walk(start, followlinks=False):
        here = pathlib.Path(dirpath)
        rel_dir = here.relative_to(root).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        keep = []
        for d in dirnames:
            if d == ".git" or (not rel_dir and d in ALWAYS_SKIPPED):
                continue
            if (here / d).is_symlink():
                yield rel_dir + d  # a folder link is a candidate; it is expanded (and checked) later
            else:
                keep.append(d)
        dirnames[:] = sorted(keep)
        for name in sorted(filenames):
            yield rel_dir + name


def _included(root: pathlib.Path, patterns: list[globs.Pattern]) -> set[str]:
    found: set[str] = set()
    starts = {p.base for p in patterns if p.anchored} | ({""} if any(not p.anchored for p in patterns) else set())
    for base in sorted(starts):
        for rel in _walk_files(root, root / base if base else root):
            if globs.first_match(patterns, rel):
                found.add(rel)
    return found


class _Collector:
    """Resolves candidate paths into real files, gathering every refusal before raising."""

    def __init__(
        self, root: pathlib.Path, exclude: list[globs.Pattern], cache: HashCache, defer_hashing: bool = False
    ) -> None:
        self.root = root
        self.root_prefix = os.fspath(root) + "/"
        self.defer_hashing = defer_hashing
        self.real_root = root.resolve()
        self.exclude = exclude
        self.cache = cache
        self.files: dict[str, PackedFile] = {}
        self.bad_paths: list[str] = []
        self.bad_links: list[str] = []
        self.missing: list[str] = []
        self.too_big: list[str] = []

    def add(self, rel: str, depth: int = 0) -> None:
        if _skipped(rel) or globs.first_match(self.exclude, rel):
            return
        problem = path_problem(rel)
        if problem:
            self.bad_paths.append(f"{rel!r}: {problem}")
            return
        path = self.root_prefix + rel  # plain strings: this runs once per file of the lab
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            self.missing.append(rel)
            return
        if stat.S_ISLNK(st.st_mode):
            self._add_link(rel, pathlib.Path(path), depth)
        elif stat.S_ISREG(st.st_mode):
            self._add_file(rel, path, st)  # not a link: lstat is stat (one syscall per file, not two)
        # anything else (a folder from a submodule, a fifo, a socket) is not content: skipped

    def _add_link(self, rel: str, path: pathlib.Path, depth: int) -> None:
        target = os.readlink(path)
        try:
            real = path.resolve(strict=True)
        except (FileNotFoundError, RuntimeError, OSError):
            self.bad_links.append(f"{rel} -> {target} (broken link)")
            return
        if not real.is_relative_to(self.real_root):
            self.bad_links.append(f"{rel} -> {target} (points outside the lab)")
            return
        if real.is_dir():
            if path.parent.resolve().is_relative_to(real):
                self.bad_links.append(f"{rel} -> {target} (points to a folder that contains it)")
                return
            if depth >= _MAX_LINK_DEPTH:
                self.bad_links.append(f"{rel} -> {target} (too many nested links)")
                return
            for sub in _walk_files(real, real):
                self.add(f"{rel}/{sub}", depth + 1)
        elif real.is_file():
            self._add_file(rel, real, real.stat())

    def _add_file(self, rel: str, real: str | pathlib.Path, st: os.stat_result) -> None:
        if st.st_size > MAX_BLOB_BYTES:  # refused by size alone: never read (it may be sparse)
            self.too_big.append(f"{rel} ({st.st_size / (1 << 30):.1f} GiB)")
            return
        digest = (self.cache.known(rel, st) or "") if self.defer_hashing else self.cache.digest(rel, real, st)
        executable = bool(st.st_mode & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH))
        self.files[rel] = PackedFile(rel, real, digest, st.st_size, executable, st)

    def refuse_problems(self, what: str) -> None:
        if self.bad_paths:
            raise usage(
                f"cannot pack {len(self.bad_paths)} file(s) of {what} with unusable paths",
                details=_listing(self.bad_paths),
                hint="rename them, or add them to package.exclude in starforge.yaml",
            )
        if self.too_big:
            raise usage(
                f"cannot pack {len(self.too_big)} file(s) of {what} larger than {MAX_BLOB_BYTES >> 30} GiB",
                details=_listing(self.too_big),
                hint="keep big data out of the lab (package.exclude in starforge.yaml) and read it from storage",
            )
        if self.bad_links:
            raise usage(
                f"refusing to pack {len(self.bad_links)} symlink(s) that do not resolve inside {what}",
                details=_listing(self.bad_links),
                hint="replace them with the files themselves, or add them to package.exclude in starforge.yaml",
            )


def _refuse_sensitive(files: dict[str, PackedFile], what: str) -> None:
    found = []
    for rel, f in sorted(files.items()):
        why = sensitive.why_sensitive(rel, f.real)
        if why:
            found.append((rel, why))
    if not found:
        return
    names = [rel for rel, _ in found]
    example = ", ".join(f'"{n}"' for n in names[:3])
    raise usage(
        f"refusing to pack {len(found)} sensitive file(s) from {what}: {', '.join(names[:MAX_LISTED])}",
        details=_listing([f"{rel} ({why})" for rel, why in found]),
        hint=(
            f"secrets stay on your machine: add them to package.exclude in starforge.yaml "
            f"(exclude: [{example}]), or stop tracking them with `git rm --cached <file>`"
        ),
    )


def pack_lab(
    root: pathlib.Path,
    settings: LabSettings,
    *,
    allow_dirty: bool = False,
    use_cache: bool = True,
    cache: HashCache | None = None,
    defer_hashing: bool = False,
) -> Pack:
    """Pack the lab at `root` from git (see the module docstring).

    `defer_hashing`: files the hash cache does not know are left unhashed (sha256 "", the
    manifest empty) for the caller to hash while it uploads, then record with `Pack.hashed`;
    every refusal (paths, links, sizes, secrets) has happened already."""
    git = read_state(root)
    changed = [c for c in git.changed if not _skipped(c.split(" ", 1)[-1])]
    if changed and not allow_dirty:
        raise usage(
            f"the lab has {len(changed)} uncommitted change(s); a run must be traceable to a commit",
            details=_listing(changed),
            hint="commit them (`git commit -am ...`) or pass --allow-dirty to submit anyway (recorded as dirty)",
        )
    include = globs.compile_all(settings.include)
    exclude = globs.compile_all(settings.exclude)
    if cache is None:
        cache = HashCache(root / CACHE_FILE if use_cache else None)
    collector = _Collector(root, exclude, cache, defer_hashing)
    candidates = set(git.tracked) | (_included(root, include) if include else set())
    for rel in sorted(candidates):
        collector.add(rel)
    collector.refuse_problems("the lab")
    _refuse_sensitive(collector.files, "the lab")
    files = sorted(collector.files.values(), key=lambda f: f.path)
    complete = all(f.sha256 for f in files)
    if complete:
        cache.save()
    warnings: list[str] = []
    if collector.missing:
        warnings.append(
            f"{len(collector.missing)} tracked file(s) deleted in the work tree, not packed: "
            + ", ".join(collector.missing[:MAX_LISTED])
        )
    packed = collector.files.keys()
    untracked = [u for u in git.untracked if u not in packed and not _skipped(u) and not globs.first_match(exclude, u)]
    if untracked:
        shown = ", ".join(untracked[:10]) + (f" and {len(untracked) - 10} more" if len(untracked) > 10 else "")
        warnings.append(
            f"{len(untracked)} untracked file(s) not packed: {shown} "
            "(git add them, or list them in package.include of starforge.yaml)"
        )
    return Pack(
        files=files,
        _manifest=None if complete else workspace_pb2.WorkspaceManifest(),  # None: made when asked for
        git=git,
        dirty=bool(changed),
        untracked=untracked[:MAX_UNTRACKED_RECORDED],
        warnings=warnings,
        cache_hits=cache.hits,
        cache=cache,
    )


def pack_directory(folder: pathlib.Path, *, cache: HashCache | None = None) -> Pack:
    """Pack every file under `folder` (datasets: no git, same path and secret rules)."""
    if not folder.is_dir():
        raise usage(f"{folder} is not a folder")
    cache = cache or HashCache(None)
    collector = _Collector(folder, [], cache)
    for rel in _walk_files(folder, folder):
        collector.add(rel)
    collector.refuse_problems(str(folder))
    _refuse_sensitive(collector.files, str(folder))
    if not collector.files:
        raise usage(f"{folder} holds no files")
    cache.save()
    files = sorted(collector.files.values(), key=lambda f: f.path)
    return Pack(files=files, _manifest=to_manifest(files), cache_hits=cache.hits)
