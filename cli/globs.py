"""Glob patterns of starforge.yaml `package.include` / `package.exclude`, gitignore-flavoured.

- A pattern without "/" matches a file or folder name at any depth (`*.ckpt`, `__pycache__`).
- A pattern with "/" is anchored at the lab root (`data/*.jsonl`, `/notes.md`).
- `**` spans folders (`data/**/*.parquet`); `*` and `?` stay inside one path segment.
- A pattern that matches a folder matches everything below it (`checkpoints/`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_GLOB_CHARS = set("*?[")


@dataclass(frozen=True)
class Pattern:
    """One compiled pattern."""

    text: str
    regex: re.Pattern[str]
    anchored: bool
    base: str  # literal folder prefix ("" when the pattern may match anywhere)

    def matches(self, path: str) -> bool:
        """True when the '/'-separated relative `path` (or a folder above it) matches."""
        return self.regex.match(path) is not None


def _translate(glob: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(glob):
        c = glob[i]
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            end = glob.find("]", i + 2 if glob[i + 1 : i + 2] in ("!", "]") else i + 1)
            if end == -1:
                out.append(re.escape(c))
                i += 1
                continue
            body = glob[i + 1 : end]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


def compile_pattern(text: str) -> Pattern:
    """Compile one include/exclude pattern (see the module docstring)."""
    glob = text.strip()
    while glob.startswith("./"):
        glob = glob[2:]
    anchored = glob.startswith("/") or "/" in glob.rstrip("/")
    glob = glob.strip("/")
    body = _translate(glob)
    prefix = "^" if anchored else "^(?:.*/)?"
    regex = re.compile(prefix + body + "(?:/.*)?$", re.DOTALL)
    base_parts: list[str] = []
    if anchored:
        for part in glob.split("/")[:-1]:
            if _GLOB_CHARS & set(part):
                break
            base_parts.append(part)
    return Pattern(text=text, regex=regex, anchored=anchored, base="/".join(base_parts))


def compile_all(texts: tuple[str, ...] | list[str]) -> list[Pattern]:
    return [compile_pattern(t) for t in texts]


def first_match(patterns: list[Pattern], path: str) -> Pattern | None:
    """The first pattern matching `path`, or None."""
    for p in patterns:
        if p.matches(path):
            return p
    return None
