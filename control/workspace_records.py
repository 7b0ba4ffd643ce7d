"""What a console remembers of the workspaces it admitted, so that a workspace named again by its
manifest digest (SubmitJob's `workspace_digest`: every re-submission of an unchanged lab) is not
checked file by file a second time.

Two records, both in this process's memory (another replica, or this one after a restart, has
none and checks everything, as before):

- `manifest(digest)`: the stored manifest blob of that digest, parsed (its files as a serialized
  WorkspaceManifest with the sizes their blobs had, and its paths). The blob is content-addressed,
  so this is only a parse cache: it is consulted after the caller's ownership of the manifest
  blob was checked, and its sizes are used only when every blob's size (a stat each, which also
  refuses a blob deleted since) is still what it was.
- `admitted(user, digest)`: `user` had a job admitted (or a dry run accepted) with the workspace
  of manifest `digest`: every file's blob was readable by that user and every path passed the
  path and sensitive-file rules. Both facts stay true: the rules are this process's code, a
  manifest digest fixes every path and blob digest (and so every blob's content the content
  rules read), and blob ownership rows are never deleted (control/blob_access.py). The record is
  per user: one user's admission never spares another user's checks. It is written only after
  admission succeeded for a manifest whose digest admission computed from its files, never from
  a blob a user uploaded (whose text may look like a manifest).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from starforge_api.job.v1 import workspace_pb2

# Parsed manifests kept (a 10,000-file manifest takes a few MB here).
MANIFESTS = 8
# (user, manifest digest) pairs kept; the oldest is forgotten first (then checked again).
ADMITTED = 10_000


@dataclass(frozen=True)
class ParsedManifest:
    """A stored manifest's files with the sizes their blobs had when it was parsed."""

    message: bytes  # WorkspaceManifest (files, digest, total_bytes), serialized
    sizes: dict[str, int]  # blob digest -> size

    def workspace(self) -> workspace_pb2.WorkspaceManifest:
        return workspace_pb2.WorkspaceManifest.FromString(self.message)


class WorkspaceRecords:
    """The two records of the module docstring (thread-safe: admission runs on worker threads)."""

    def __init__(self, manifests: int = MANIFESTS, admitted: int = ADMITTED) -> None:
        self._lock = threading.Lock()
        self._manifests: OrderedDict[str, ParsedManifest] = OrderedDict()
        self._admitted: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._max_manifests = manifests
        self._max_admitted = admitted

    def manifest(self, digest: str) -> ParsedManifest | None:
        with self._lock:
            parsed = self._manifests.get(digest)
            if parsed is not None:
                self._manifests.move_to_end(digest)
            return parsed

    def keep_manifest(self, digest: str, parsed: ParsedManifest) -> None:
        with self._lock:
            self._manifests[digest] = parsed
            self._manifests.move_to_end(digest)
            while len(self._manifests) > self._max_manifests:
                self._manifests.popitem(last=False)

    def admitted(self, user: str, digest: str) -> bool:
        with self._lock:
            return (user, digest) in self._admitted

    def record_admitted(self, user: str, digest: str) -> None:
        with self._lock:
            self._admitted[(user, digest)] = None
            self._admitted.move_to_end((user, digest))
            while len(self._admitted) > self._max_admitted:
                self._admitted.popitem(last=False)
