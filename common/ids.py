"""Identifiers: short, sortable by creation time, safe in paths, labels and DNS names."""

from __future__ import annotations

import secrets
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lowercase


def _b32(n: int, width: int) -> str:
    out = []
    for _ in range(width):
        out.append(_ALPHABET[n & 31])
        n >>= 5
    return "".join(reversed(out))


def new_job_id() -> str:
    """'j' + 8 chars of milliseconds + 5 random chars; sorts by creation time, 14 chars."""
    return "j" + _b32(int(time.time() * 1000), 8) + _b32(secrets.randbits(25), 5)


def attempt_id(job_id: str, number: int) -> str:
    """Attempt id: '<job_id>.<number>'."""
    return f"{job_id}.{number}"


def split_attempt_id(value: str) -> tuple[str, int]:
    """Inverse of attempt_id; raises ValueError for malformed ids."""
    job_id, _, number = value.rpartition(".")
    if not job_id or not number.isdigit():
        raise ValueError(f"not an attempt id: {value!r}")
    return job_id, int(number)


def is_job_id(value: str) -> bool:
    """True for a string of new_job_id's form ('j' + 13 Crockford base32 characters)."""
    return len(value) == 14 and value[0] == "j" and all(c in _ALPHABET for c in value[1:])
