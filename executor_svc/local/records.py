"""On-disk layout of the local executor and the record it keeps per attempt.

    <state_dir>/attempts/<attempt_id>/capsule      capsule files (removed by Cleanup)
                                     /workspace    the packed lab (removed by Cleanup)
                                     /datasets     dataset files, read-only (removed by Cleanup)
                                     /scratch      FORGE_SCRATCH_DIR (removed by Cleanup)
                                     /attempt.json the record below (kept)
                                     /bootstrap.log stdout+stderr of bootstrap.sh (kept)
                                     /exit_code    written by the wrapper when the capsule exits (kept)
    <state_dir>/out/<job_id>                       FORGE_OUT_DIR, shared by the attempts of a job
    <state_dir>/blobs                              content-addressed blob cache

The record is what makes Launch idempotent and lets a restarted executor (a new process over the
same state_dir) find its attempts: it is written atomically (temp file + rename).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from executor_svc.attempt_dirs import AttemptDirs as BaseAttemptDirs
from executor_svc.attempt_dirs import check_id


@dataclass(frozen=True)
class AttemptDirs(BaseAttemptDirs):
    """Paths of one attempt under the state dir (the shared ones, plus the local kind's logs)."""

    @property
    def log(self) -> Path:
        return self.root / "bootstrap.log"

    @property
    def exit_code(self) -> Path:
        return self.root / "exit_code"

    def removable(self) -> tuple[Path, ...]:
        """What Cleanup removes (logs, record and exit code stay readable)."""
        return (self.capsule, self.datasets, self.workspace, self.scratch)


@dataclass(frozen=True)
class Layout:
    """The state dir."""

    state_dir: Path

    @property
    def attempts_dir(self) -> Path:
        return self.state_dir / "attempts"

    @property
    def cache_dir(self) -> Path:
        return self.state_dir / "blobs"

    def attempt(self, attempt_id: str) -> AttemptDirs:
        return AttemptDirs(self.attempts_dir / check_id(attempt_id, "attempt_id"))

    def out_dir(self, job_id: str) -> Path:
        return self.state_dir / "out" / check_id(job_id, "job_id")

    def attempt_ids(self) -> list[str]:
        """Attempts that have a record (launched at least once), sorted."""
        try:
            return sorted(p.parent.name for p in self.attempts_dir.glob("*/attempt.json"))
        except FileNotFoundError:
            return []


@dataclass
class AttemptRecord:
    """What the executor remembers about an attempt (attempt.json)."""

    attempt_id: str
    job_id: str
    attempt_number: int
    runtime: str
    series: str
    gpus: list[int]
    node: str
    out_dir: str
    created_at: float
    handle: str = ""
    pid: int = 0
    # Start time of `pid` in clock ticks since boot (/proc/<pid>/stat): tells a reused pid apart.
    pid_start: int = 0
    image: str = ""
    image_digest: str = ""
    # Process runtime with local.job_uid_range: the uid (and gid) the attempt runs as; -1: none.
    job_uid: int = -1
    stop_requested_at: float | None = None
    cleaned_at: float | None = None
    # Docker: the last observation, saved before Cleanup removes the container.
    final: dict[str, Any] | None = field(default=None)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(dataclasses.asdict(self), indent=1, sort_keys=True))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> AttemptRecord | None:
        """The record at `path`, or None when there is none (or it is unreadable)."""
        try:
            data = json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})
