"""How a failed attempt is classed from what it left: its exit code and the tail of its log.

bootstrap.sh exits 97 (a file failed its integrity check) or 98 (no Python in the image) before
the training command starts; out-of-memory leaves its words in the log. The local kind and the
kuberay kind (from Ray's message) class with these; Slurm says OUT_OF_MEMORY itself.
"""

from __future__ import annotations

from collections.abc import Iterable

PRECHECK_EXIT_CODES = (97, 98)
OOM_EVIDENCE = ("CUDA out of memory", "OutOfMemoryError", "MemoryError", "OOMKilled", "Out of memory: Killed process")


def shows_oom(lines: Iterable[str]) -> bool:
    """True when a log line says the process ran out of memory."""
    return any(e in line for line in lines for e in OOM_EVIDENCE)
