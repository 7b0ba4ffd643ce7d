"""The one rule for a relative path in a manifest (capsule, workspace, dataset files).

A path is relative, '/'-separated, with no empty, '.' or '..' component, no backslash or NUL, and
no component longer than a file system takes. `executor_svc/kuberay/fetch.py` runs inside pods
as standard-library-only source and spells the same rule out again; a unit test holds the two to
the same answers.
"""

from __future__ import annotations

from common import errors
from common.sensitive import MAX_NAME_BYTES


def relative_path_problem(path: str) -> str:
    """Why `path` could leave its root ("" when it is safe)."""
    if not path:
        return "is empty"
    if path.startswith("/"):
        return "is absolute"
    if "\\" in path or "\x00" in path:
        return "contains a backslash or NUL"
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "has an empty, '.' or '..' component"
    if any(len(p.encode()) > MAX_NAME_BYTES for p in parts):
        return f"has a component longer than {MAX_NAME_BYTES} bytes"
    return ""


def check_relative_path(path: str, field: str) -> tuple[str, ...]:
    """The components of a manifest path, or InvalidArgument when it could leave its root."""
    reason = relative_path_problem(path)
    if reason:
        raise errors.InvalidArgument(
            f"file path {path[:200]!r} {reason}; paths must be relative, '/'-separated, without '..'",
            field_violations=(errors.FieldViolation(field, reason),),
        )
    return tuple(path.split("/"))
