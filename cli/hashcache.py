"""A per-lab cache of file digests so that re-submitting an unchanged lab reads no file twice.

Entries are keyed by path and validated by (size, mtime_ns, inode): any change to the file
changes one of them. Like git's "racy clean" rule, a file modified less than two seconds before
it was hashed is not cached, because a second write within the file system's timestamp
granularity could keep all three equal. The cache is an optimisation only: a missing, corrupt
or unwritable cache file is silently rebuilt.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import tempfile
import time
from collections.abc import Callable
from typing import Any

from common.hashing import sha256_file

CACHE_VERSION = 1
RACY_WINDOW_NS = 2_000_000_000

# One entry, as stored in the JSON file: [size, mtime_ns, inode, sha256]. Entries are kept as
# the lists json.loads returns and compared field by field on lookup: converting 10,000 of them
# into tuples up front was most of the cost of loading the cache on a re-submit.
Entry = list[Any]


class HashCache:
    """Digests by relative path; `save()` keeps only the entries used since `load`."""

    def __init__(self, path: pathlib.Path | None, hasher: Callable[[pathlib.Path], str] = sha256_file) -> None:
        self.path = path
        self.hasher = hasher
        self._old: dict[str, Entry] = {}
        self._new: dict[str, Entry] = {}
        self.hits = 0
        self.misses = 0
        if path is not None:
            self._old = _read(path)

    def digest(self, rel: str, real: str | pathlib.Path, st: os.stat_result) -> str:
        """sha256 of `real` (known as `rel`), from the cache when its stat key is unchanged."""
        cached = self.known(rel, st)
        if cached is not None:
            return cached
        digest = self.hasher(pathlib.Path(real))
        self.add(rel, st, digest)
        return digest

    def known(self, rel: str, st: os.stat_result) -> str | None:
        """The cached digest of `rel` when its stat key is unchanged (a hit), else None (a miss:
        the caller hashes the file and calls `add`)."""
        e = self._old.get(rel)
        if (
            isinstance(e, list)
            and len(e) == 4
            and e[0] == st.st_size
            and e[1] == st.st_mtime_ns
            and e[2] == st.st_ino
            and isinstance(e[3], str)
        ):
            self.hits += 1
            self._new[rel] = e
            return e[3]
        self.misses += 1
        return None

    def add(self, rel: str, st: os.stat_result, digest: str) -> None:
        """Remember the digest just computed for `rel` as it was at `st` (not when modified within
        the racy window)."""
        if time.time_ns() - st.st_mtime_ns > RACY_WINDOW_NS:
            self._new[rel] = [st.st_size, st.st_mtime_ns, st.st_ino, digest]

    def save(self) -> None:
        """Write the cache atomically; failures are ignored (it is only a cache)."""
        if self.path is None or self._new == self._old:
            return
        _write_atomically(self.path, {"version": CACHE_VERSION, "entries": dict(sorted(self._new.items()))})


def _write_atomically(path: pathlib.Path, data: object) -> None:
    """Write `data` as JSON to `path` through a temporary file and a rename; a failure leaves the
    old file (or none) and is ignored: these files are only caches."""
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}-", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                # dumps, not dump: json.dump encodes in pure Python, piece by piece (a 10,000-file
                # lab's cache took ~0.5 s of a first submit); dumps uses the C encoder
                f.write(json.dumps(data, separators=(",", ":")))
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _read(path: pathlib.Path) -> dict[str, Entry]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
            return {}
        entries = data["entries"]
        return entries if isinstance(entries, dict) else {}
    except (OSError, ValueError, KeyError):
        return {}


class AdmittedWorkspaces:
    """The manifest digest each console last admitted for this lab, by console address.

    An unchanged lab is then submitted by that digest alone (SubmitJob's workspace_digest) instead
    of its whole file list. A stale or foreign entry costs one refused call and a full submit (the
    console decides what the caller may name), so like the hash cache this is only an
    optimisation: a missing, corrupt or unwritable file is ignored.
    """

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path
        self._by_console: dict[str, str] = {}
        with contextlib.suppress(OSError, ValueError, TypeError, AttributeError, KeyError):
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("version") == CACHE_VERSION:
                self._by_console = {str(k): str(v) for k, v in data["admitted"].items()}

    def get(self, console: str) -> str:
        """The digest `console` last admitted for this lab ("" when none is known)."""
        return self._by_console.get(console, "")

    def remember(self, console: str, digest: str) -> None:
        """Record (atomically) that `console` admitted the manifest `digest`; "" forgets it."""
        if self._by_console.get(console, "") == digest:
            return
        if digest:
            self._by_console[console] = digest
        else:
            self._by_console.pop(console, None)
        _write_atomically(self.path, {"version": CACHE_VERSION, "admitted": self._by_console})
