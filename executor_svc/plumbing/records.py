"""The attempt tree of a kind that stages files, and the JSON record it keeps per attempt.

    <attempts_root>/<attempt_id>/...          AttemptDirs (executor_svc.attempt_dirs) + kind's files
                                /attempt.json  the kind's record (a `JsonRecord`), kept after Cleanup
    <out_root>/<out key>                       FORGE_OUT_DIR, shared by the attempts of a job

The record is written before the backend object is made (temp file + rename), which makes Launch
idempotent per attempt id and lets a restarted executor find its attempts.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Generic, Self, TypeVar

from executor_svc.attempt_dirs import AttemptDirs, check_id

D = TypeVar("D", bound=AttemptDirs)


class JsonRecord:
    """A dataclass saved as one JSON object; unknown keys are ignored on load (newer writers)."""

    def save(self, path: Path) -> None:
        """Write atomically (temp file + rename); the parent directory is made when missing."""
        assert dataclasses.is_dataclass(self)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(dataclasses.asdict(self), indent=1, sort_keys=True))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> Self | None:
        """The record at `path`, or None when there is none (or it is unreadable)."""
        try:
            data = json.loads(path.read_text())
        except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
            return None
        if not isinstance(data, dict):
            return None
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        values: dict[str, Any] = {k: v for k, v in data.items() if k in names}
        try:
            return cls(**values)
        except TypeError:  # a field the record must have is missing
            return None


class AttemptTree(Generic[D]):
    """Where a kind keeps its attempts and its jobs' out dirs (see the module docstring)."""

    dirs_class: type[D]

    @property
    def attempts_root(self) -> Path:
        raise NotImplementedError

    @property
    def out_root(self) -> Path:
        raise NotImplementedError

    def attempt(self, attempt_id: str) -> D:
        """The attempt's directories; InvalidArgument for an id that is not safe as a name."""
        return self.dirs_class(self.attempts_root / check_id(attempt_id, "attempt_id"))

    def out_dir(self, job_id: str) -> Path:
        """FORGE_OUT_DIR of a job (or of the run a pipeline stage belongs to)."""
        return self.out_root / check_id(job_id, "job_id")

    def attempt_ids(self) -> list[str]:
        """Attempts that have a record (launched at least once), sorted."""
        try:
            return sorted(p.parent.name for p in self.attempts_root.glob("*/attempt.json"))
        except FileNotFoundError:
            return []
