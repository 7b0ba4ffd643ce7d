"""Path checks shared by the runner's readers of capsule.json."""

from __future__ import annotations

import pathlib


def safe_relative(path: str) -> pathlib.PurePosixPath | None:
    """The path as a relative POSIX path, or None if it is absolute, empty or escapes with '..'."""
    if not path or path.startswith("/") or "\\" in path or "\0" in path:
        return None
    pure = pathlib.PurePosixPath(path)
    if any(part in ("..", "") for part in pure.parts) or str(pure) == ".":
        return None
    return pure
