"""Hydra override syntax (`key=value`), as verl's main_ppo and NeMo-RL's run scripts parse it.

Values are written so that Hydra reads back exactly the type the server resolved: a string that
Hydra would take for a number, a bool or null ("1e-6", "true", "null") is quoted, as is anything
with characters outside Hydra's unquoted grammar (spaces, commas, brackets, quotes, "=", "~",
"${"). argv goes to the process directly, so this is quoting for Hydra's parser, not for a shell.
"""

from __future__ import annotations

import math
import re
from typing import Any

# Characters Hydra's grammar accepts in an unquoted primitive (ID chars, ':' and a few symbols).
_SAFE = re.compile(r"^[A-Za-z0-9_\-/+.@:]+$")
# Unquoted strings Hydra would turn into another type.
_TYPED = re.compile(
    r"^(?:[+-]?\d[\d_]*|[+-]?(?:\d[\d_]*)?\.?\d[\d_]*(?:[eE][+-]?\d+)?|[+-]?\d+\.|"
    r"[+-]?(?:inf|nan)|true|false|null)$",
    re.IGNORECASE,
)


_BACKSLASHES_BEFORE_QUOTE = re.compile(r"(\\+)(?='|\Z)")


def value(v: Any) -> str:
    """One value in Hydra's override grammar."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"{v!r} cannot be a config value")
        return repr(v)
    if isinstance(v, list | tuple):
        return "[" + ",".join(value(item) for item in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(f"{_key(str(k))}:{value(item)}" for k, item in v.items()) + "}"
    return _string(str(v))


def _key(k: str) -> str:
    if not _SAFE.match(k):
        raise ValueError(f"{k!r} cannot be a key of a Hydra dict value (Hydra does not quote keys)")
    return k


def _string(s: str) -> str:
    if _SAFE.match(s) and not _TYPED.match(s):
        return s
    # Hydra's quoted strings: a quote is escaped with a backslash, and backslashes are literal
    # except in a run that ends at a quote (or the closing quote), where they are doubled.
    body = _BACKSLASHES_BEFORE_QUOTE.sub(lambda m: m.group(1) * 2, s)
    body = body.replace("'", "\\'").replace("${", "\\${")
    return f"'{body}'"


def override(key: str, v: Any) -> str:
    return f"{key}={value(v)}"
