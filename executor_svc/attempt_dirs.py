"""What every executor kind that stages files shares: safe attempt ids and an attempt's directories.

    <root>/capsule    capsule files, read-only for the job         (removed by Cleanup)
          /datasets   <name>/... dataset files, read-only for the job (removed by Cleanup)
          /workspace  the packed lab, the job's                     (removed by Cleanup)
          /scratch    FORGE_SCRATCH_DIR, the job's                  (removed by Cleanup)
          /attempt.json  the kind's own record (kept)

Datasets sit beside the scratch dir, never under it: the job owns its scratch dir, and a dataset
must stay read-only for the job (a separate read-only mount for containers).

Kinds add their own files (logs, outcome markers) in subclasses. Standard library only, so a kind
can use it without importing another kind (the local kind would pull in the docker SDK).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from common import errors

# Attempt ids are "<job_id>.<n>" and job ids short base32: anything else could name a path outside.
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}(\.[0-9]{1,6})?$")


def check_id(value: str, field_name: str) -> str:
    """`value` when it is safe as a directory name, else InvalidArgument."""
    if not _SAFE_ID.match(value):
        raise errors.InvalidArgument(
            f"{field_name} {value[:80]!r} is not a valid id (letters, digits, '-', '_', then '.<n>')",
            field_violations=(errors.FieldViolation(field_name, "not a valid id"),),
        )
    return value


@dataclass(frozen=True)
class AttemptDirs:
    """Paths of one attempt under an executor's state or staging dir."""

    root: Path

    @property
    def capsule(self) -> Path:
        return self.root / "capsule"

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def scratch(self) -> Path:
        return self.root / "scratch"

    @property
    def datasets(self) -> Path:
        return self.root / "datasets"

    @property
    def record(self) -> Path:
        return self.root / "attempt.json"

    def removable(self) -> tuple[Path, ...]:
        """What Cleanup removes (the record and the kind's logs and markers stay readable)."""
        return (self.capsule, self.datasets, self.workspace, self.scratch)
