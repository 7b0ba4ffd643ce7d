"""An in-memory view of the executor's RayJobs, kept current by one list + watch (a thread).

The loop is the informer pattern without client-go: list (label selector) to get every object and
the list's resourceVersion, then watch from that version, applying ADDED / MODIFIED / DELETED and
remembering the newest resourceVersion (BOOKMARK events move it without an object). When the
server ends the watch (its timeout) the loop re-watches from where it was; when the version has
been compacted away (410 Gone, as an ERROR event or a status) it lists again. Any other failure
marks the view stale and lists again after an exponential backoff (0.2 s doubling to 10 s): a
watch is resumed only from a version this loop has itself seen without a gap.

`synced` is True only while the view is complete and a watch is open: callers must fall back to
a GET when it is False, and a name missing from a synced view is most likely gone (still
confirmed with a GET by the executor, because a create may not have been delivered yet).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

from common import errors
from executor_svc.kuberay.kube import KubeApi, ResourceExpired

log = logging.getLogger("starforge.executor.kuberay.watch")

BACKOFF_START = 0.2
BACKOFF_MAX = 10.0


class _Gone(Exception):
    """The watch's resourceVersion is too old: list again."""


def _rv(obj: dict[str, Any]) -> int | None:
    value = (obj.get("metadata") or {}).get("resourceVersion", "")
    return int(value) if isinstance(value, str) and value.isdigit() else None


def _lines(resp: Any) -> Iterator[bytes]:
    """The newline-delimited JSON events of a watch response."""
    buf = b""
    for chunk in resp.stream(64 * 1024, decode_content=True):
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.strip():
                yield line
    if buf.strip():
        yield buf


class RayJobWatch:
    """name -> RayJob dict for every RayJob matching `selector`, maintained by a daemon thread."""

    def __init__(self, kube: KubeApi, selector: str, timeout_seconds: int) -> None:
        self.kube = kube
        self.selector = selector
        self.timeout_seconds = timeout_seconds
        self._objects: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._resp: Any = None
        self._thread = threading.Thread(target=self._run, name="kuberay-watch", daemon=True)
        self.last_error = ""

    # -- reading ----------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def get(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._objects.get(name)

    def items(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._objects.values())

    # -- writing (the executor's own results, so a read right after launch sees the object) --

    def offer(self, obj: dict[str, Any]) -> None:
        """Keep `obj` unless the view already holds a newer version of it."""
        name = obj["metadata"]["name"]
        with self._lock:
            have = self._objects.get(name)
            new, old = _rv(obj), _rv(have) if have else None
            if have is None or new is None or old is None or new >= old:
                self._objects[name] = obj

    def discard(self, name: str) -> None:
        with self._lock:
            self._objects.pop(name, None)

    # -- the loop ---------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        resp = self._resp
        if resp is not None:
            with contextlib.suppress(Exception):  # best effort; the thread is a daemon anyway
                resp.shutdown()  # unblocks the read in the watch thread (urllib3 >= 2.3)
        self._thread.join(timeout)

    def _run(self) -> None:
        backoff = BACKOFF_START
        version = ""
        while not self._stop.is_set():
            try:
                if not version:
                    version = self._relist()
                version = self._watch(version)
                backoff = BACKOFF_START
            except (_Gone, ResourceExpired):
                log.info("RayJob watch: resourceVersion %s expired; listing again", version)
                version = ""
            except Exception as exc:  # unreachable, a broken stream, bad JSON: start over from a list
                self._stale(exc.message if isinstance(exc, errors.StarforgeError) else f"{type(exc).__name__}: {exc}")
                version = ""
                self._stop.wait(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
        self._synced.clear()

    def _stale(self, why: str) -> None:
        if self._stop.is_set():
            return
        if why != self.last_error:
            log.warning("RayJob watch interrupted (observe falls back to GET): %s", why)
        self.last_error = why
        self._synced.clear()

    def _relist(self) -> str:
        items, version = self.kube.list_rayjobs(self.selector)
        with self._lock:
            self._objects = {i["metadata"]["name"]: i for i in items}
        return version

    def _watch(self, version: str) -> str:
        resp = self.kube.watch_rayjobs(self.selector, version, self.timeout_seconds)
        self._resp = resp
        try:
            if self._stop.is_set():
                return version
            self._synced.set()
            self.last_error = ""
            for line in _lines(resp):
                version = self._apply(json.loads(line), version)
                if self._stop.is_set():
                    break
        finally:
            self._resp = None
            self._synced.clear()
            resp.release_conn()
        return version

    def _apply(self, event: dict[str, Any], version: str) -> str:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Gone()
            raise errors.Unavailable(f"watch error from the Kubernetes API: {obj.get('message') or obj}")
        new_version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
        if kind in ("ADDED", "MODIFIED"):
            with self._lock:
                self._objects[obj["metadata"]["name"]] = obj
        elif kind == "DELETED":
            self.discard(obj["metadata"]["name"])
        return new_version
