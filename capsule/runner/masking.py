"""Masking the job's secret values in what the runner echoes and journals.

The control plane names the variables that hold secrets in FORGE_SECRET_ENV (names only, comma
separated). Their values are replaced with ``***`` in every line before it is echoed to the
executor's log file or journalled for ingest, so a training command that prints a secret leaves
it neither on the node's disk nor in the console (which masks again at ingest).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

MASKED_NAMES_VAR = "FORGE_SECRET_ENV"
MASK = "***"
# Shorter values are not masked: replacing every "ab" would destroy the log, not hide a secret.
MIN_MASKED_CHARS = 4


def secret_mask(environ: Mapping[str, str]) -> Callable[[str], str] | None:
    """The masking function for this job's secrets, or None when it has none."""
    names = [n for n in environ.get(MASKED_NAMES_VAR, "").split(",") if n]
    values: set[str] = set()
    for name in names:
        value = environ.get(name, "")
        values.update(v.strip() for v in (value, *value.splitlines()))
    values = {v for v in values if len(v) >= MIN_MASKED_CHARS}
    if not values:
        return None
    pattern = re.compile("|".join(re.escape(v) for v in sorted(values, key=lambda v: (-len(v), v))))
    return lambda text: pattern.sub(MASK, text)
