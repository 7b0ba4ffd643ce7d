"""The one rule for a relative path inside a workspace, capsule or dataset manifest.

A path is relative, '/'-separated, with no empty, '.' or '..' component, no backslash or NUL, and
no component longer than a file system takes. Admission and datasets (`common.sensitive.bad_path`),
the capsule writer (`capsule.layout.check_path`) and every executor kind
(`executor_svc.plumbing.paths`) apply it. Code that runs alone inside a job or a pod, with the
standard library only (kuberay's fetch.py, the runner's paths.py), spells it out again; a unit test
holds fetch.py to the same answers.
"""

from __future__ import annotations

MAX_NAME_BYTES = 255  # the longest file name component common file systems take


def relative_path_problem(path: str) -> str:
    """Why `path` could leave its root or cannot be a file name ("" when it is safe)."""
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
