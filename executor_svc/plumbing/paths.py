"""The relative-path rule of manifests (common/relpath.py) as an executor's InvalidArgument.

`executor_svc/kuberay/fetch.py` runs inside pods as standard-library-only source and spells the
same rule out again; a unit test holds the two to the same answers.
"""

from __future__ import annotations

from common import errors
from common.relpath import relative_path_problem


def check_relative_path(path: str, field: str) -> tuple[str, ...]:
    """The components of a manifest path, or InvalidArgument when it could leave its root."""
    reason = relative_path_problem(path)
    if reason:
        raise errors.InvalidArgument(
            f"file path {path[:200]!r} {reason}; paths must be relative, '/'-separated, without '..'",
            field_violations=(errors.FieldViolation(field, reason),),
        )
    return tuple(path.split("/"))
