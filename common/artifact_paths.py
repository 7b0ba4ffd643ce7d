"""The one rule for artifact paths, shared by the control plane (which refuses bad ones before
calling an executor) and the executors (which refuse them again before touching a disk)."""

from __future__ import annotations

from common import errors

MAX_PATH_BYTES = 4096
MAX_DEPTH = 64


def split_path(path: str, field_name: str = "path") -> list[str]:
    """The parts of a request path, or InvalidArgument with the reason."""

    def bad(why: str) -> errors.InvalidArgument:
        return errors.InvalidArgument(
            f"{field_name} {path[:200]!r} {why}; give a path relative to the job's out dir, as listed",
            field_violations=(errors.FieldViolation(field_name, why),),
        )

    if not path:
        raise bad("is empty")
    if len(path.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        raise bad(f"is longer than {MAX_PATH_BYTES} bytes")
    if "\x00" in path:
        raise bad("contains a NUL byte")
    if path.startswith("/"):
        raise bad("is absolute")
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise bad("has an empty, '.' or '..' part")
    if len(parts) > MAX_DEPTH:
        raise bad(f"is deeper than {MAX_DEPTH} levels")
    return parts
