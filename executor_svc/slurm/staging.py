"""The slurm executor's files on the shared file system, and the record it keeps per attempt.

    <staging_dir>/.records/<attempt_id>.json the record below (kept; the executor's alone, 0700)
    <staging_dir>/<attempt_id>/job.sh        the batch script as submitted, no secrets (kept)
                              /job.log       the job's stdout and stderr (kept)
                              /started       written by the batch script when it starts (kept)
                              /outcome       exit code, signal, end time, written last (kept)
                              /capsule       capsule files          } removed by Cleanup
                              /datasets      dataset files          }
                              /workspace     the packed lab (cwd)   }
                              /scratch       FORGE_SCRATCH_DIR      }
    <staging_dir>/.blobs                     content-addressed blob cache (bundle.py)
    <out_dir>/<job_id>                       FORGE_OUT_DIR, shared by the attempts of a job

The staging dir is at the same path on the executor's host and on every node, so nothing is
translated. The record makes Launch idempotent and, with the outcome marker, lets a restarted
executor answer for attempts whose job slurmctld already forgot. It is written atomically, and
never inside the attempt dir: that belongs to the job's user, who could otherwise swap the record
(naming another tenant's Slurm job) or plant a link where the executor writes as root. What the
executor reads from the attempt dir (log, markers) it opens without following links, and only
when it is a regular file.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from executor_svc.attempt_dirs import AttemptDirs as BaseAttemptDirs
from executor_svc.attempt_dirs import check_id
from executor_svc.plumbing.records import AttemptTree, JsonRecord
from executor_svc.slurm.script import OUTCOME_FILE, STARTED_FILE

LOG_TAIL_LINES = 50
RECORDS_DIR = ".records"
# What the executor reads from a job's files at most (markers are a few lines).
MARKER_MAX_BYTES = 4096


@contextlib.contextmanager
def open_job_file(path: Path) -> Iterator[BinaryIO | None]:
    """`path` opened for reading when it is a regular file, else None (missing, a link, a FIFO...).

    The job's user owns the directory: a link there could make the executor (root) read another
    tenant's file into an observation, and a FIFO could block it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        yield None
        return
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EACCES):
            yield None
            return
        raise
    with os.fdopen(fd, "rb") as handle:
        yield handle if stat.S_ISREG(os.fstat(fd).st_mode) else None


def read_marker(path: Path) -> str | None:
    """A small file the batch script writes (text), or None."""
    with open_job_file(path) as f:
        return None if f is None else f.read(MARKER_MAX_BYTES).decode("utf-8", errors="replace")


@dataclass(frozen=True)
class AttemptDirs(BaseAttemptDirs):
    """Paths of one attempt under the staging dir (the shared ones, plus the batch job's files)."""

    # Where the record lives (the executor's own dir), outside the job user's attempt dir.
    records: Path = Path("/nonexistent")

    @property
    def record(self) -> Path:
        return self.records / f"{self.root.name}.json"

    @property
    def script(self) -> Path:
        return self.root / "job.sh"

    @property
    def log(self) -> Path:
        return self.root / "job.log"

    @property
    def started(self) -> Path:
        return self.root / STARTED_FILE

    @property
    def outcome(self) -> Path:
        return self.root / OUTCOME_FILE


@dataclass(frozen=True)
class Layout(AttemptTree[AttemptDirs]):
    staging_dir: Path
    out_root_dir: Path
    dirs_class = AttemptDirs

    @property
    def attempts_root(self) -> Path:
        return self.staging_dir

    @property
    def out_root(self) -> Path:
        return self.out_root_dir

    @property
    def records(self) -> Path:
        return self.staging_dir / RECORDS_DIR

    def attempt(self, attempt_id: str) -> AttemptDirs:
        """The attempt's directories; its record lives in the executor's records dir, outside
        the attempt dir the job's user owns."""
        return AttemptDirs(self.attempts_root / check_id(attempt_id, "attempt_id"), self.records)

    def attempt_ids(self) -> list[str]:
        """Attempts with a record (submitted at least once), sorted."""
        try:
            return sorted(p.stem for p in self.records.glob("*.json"))
        except FileNotFoundError:
            return []


@dataclass
class AttemptRecord(JsonRecord):
    """What the executor remembers about an attempt (attempt.json)."""

    attempt_id: str
    job_id: str
    attempt_number: int
    slurm_job_id: int
    out_dir: str
    created_at: float
    pools: list[dict[str, Any]] = field(default_factory=list)
    image: str = ""
    # What the job ran: sha256 of the image file, or a sentence saying why there is none.
    image_digest: str = ""
    # The Unix user the job runs as (slurm.tenants), "" for the section's `user`.
    unix_user: str = ""
    stop_requested_at: float | None = None
    cleaned_at: float | None = None


@dataclass(frozen=True)
class Outcome:
    """The batch script's last words (see script.py): how it ended, readable after Slurm forgot."""

    exit_code: int
    signal: str
    ended_at: dt.datetime | None
    phase: str  # "capsule" or "ray"


def read_outcome(path: Path) -> Outcome | None:
    text = read_marker(path)
    if text is None:
        return None
    values = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    try:
        code = int(values.get("exit_code", ""))
    except ValueError:
        return None
    return Outcome(
        exit_code=code,
        signal=values.get("signal", ""),
        ended_at=_epoch(values.get("ended_at", "")),
        phase=values.get("phase", ""),
    )


def read_started(path: Path) -> dt.datetime | None:
    text = read_marker(path)
    return None if text is None else _epoch(text.strip())


def _epoch(value: str) -> dt.datetime | None:
    try:
        return dt.datetime.fromtimestamp(int(value), dt.UTC)
    except (ValueError, OverflowError, OSError):
        return None


def read_log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last `lines` lines of `path` (read from the end: logs can be large)."""
    with open_job_file(path) as f:
        if f is None:
            return []
        f.seek(0, os.SEEK_END)
        size = f.tell()
        block = min(size, 64 * 1024)
        f.seek(size - block)
        data = f.read(block)
    text = data.decode("utf-8", errors="replace").splitlines()
    if block < size and text:
        text = text[1:]  # the first line may be cut
    return text[-lines:]


def secure_roots(staging_dir: Path, out_root: Path, cache_dir: Path) -> None:
    """Jobs traverse the staging and out roots but never list them; the cache and the records
    are the executor's."""
    for d, mode in ((staging_dir, 0o711), (out_root, 0o711), (cache_dir, 0o700), (staging_dir / RECORDS_DIR, 0o700)):
        d.mkdir(parents=True, exist_ok=True)
        os.chmod(d, mode)


def hand_over(dirs: AttemptDirs, out_dir: Path, uid: int, gid: int) -> None:
    """Give the job user what it writes: the attempt dir (log, markers), workspace (its cwd),
    scratch and the out dir, each 0700: a job running as another uid sees none of it. Capsule
    and dataset files stay the executor's, read-only (links into the cache, or private copies)."""
    for path in (dirs.root, dirs.scratch, out_dir):
        if uid >= 0:
            os.chown(path, uid, gid)
        os.chmod(path, 0o700)
    for path in (dirs.capsule, dirs.datasets):
        os.chmod(path, 0o755)  # noqa: S103 - inside the 0700 attempt dir: read-only for the job
    if uid < 0:
        return
    for top, subdirs, files in os.walk(dirs.workspace):
        os.chown(top, uid, gid)
        for name in (*subdirs, *files):
            with contextlib.suppress(FileNotFoundError):
                os.chown(os.path.join(top, name), uid, gid, follow_symlinks=False)
