"""On-disk layout of the local executor and the record it keeps per attempt.

    <state_dir>/attempts/<attempt_id>/capsule      capsule files (removed by Cleanup)
                                     /workspace    the packed lab (removed by Cleanup)
                                     /datasets     dataset files, read-only (removed by Cleanup)
                                     /scratch      FORGE_SCRATCH_DIR (removed by Cleanup)
                                     /attempt.json the record below (kept)
                                     /bootstrap.log stdout+stderr of bootstrap.sh (kept)
                                     /exit_code    written by the wrapper (or the zygote) when the capsule exits (kept)
    <state_dir>/out/<job_id>                       FORGE_OUT_DIR, shared by the attempts of a job
    <state_dir>/blobs                              content-addressed blob cache

The record is what makes Launch idempotent and lets a restarted executor (a new process over the
same state_dir) find its attempts: it is written atomically (temp file + rename).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from executor_svc.attempt_dirs import AttemptDirs as BaseAttemptDirs
from executor_svc.plumbing.records import AttemptTree, JsonRecord


@dataclass(frozen=True)
class AttemptDirs(BaseAttemptDirs):
    """Paths of one attempt under the state dir (the shared ones, plus the local kind's logs)."""

    @property
    def log(self) -> Path:
        return self.root / "bootstrap.log"

    @property
    def exit_code(self) -> Path:
        return self.root / "exit_code"


@dataclass(frozen=True)
class Layout(AttemptTree[AttemptDirs]):
    """The state dir."""

    state_dir: Path
    dirs_class = AttemptDirs

    @property
    def attempts_dir(self) -> Path:
        return self.state_dir / "attempts"

    @property
    def attempts_root(self) -> Path:
        return self.attempts_dir

    @property
    def out_root(self) -> Path:
        return self.state_dir / "out"

    @property
    def cache_dir(self) -> Path:
        return self.state_dir / "blobs"


@dataclass
class AttemptRecord(JsonRecord):
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
    # Process runtime: forked by a pre-forked runner's zygote, which writes exit_code before it
    # reaps the ended runner (so an unreaped runner has not ended as far as the record goes).
    preforked: bool = False
    stop_requested_at: float | None = None
    cleaned_at: float | None = None
    # Docker: the last observation, saved before Cleanup removes the container.
    final: dict[str, Any] | None = field(default=None)
