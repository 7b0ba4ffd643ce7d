"""Make this process non-dumpable, so that other processes of the same user cannot read it.

Executors and forgelets hold every launched attempt's run token in memory and start the capsules;
where a capsule runs as the same user (the process runtime without a separate job user), its
training code could otherwise read their memory (/proc/<pid>/mem), environment and file
descriptors, or attach with ptrace. prctl(PR_SET_DUMPABLE, 0) closes all of these to processes
without CAP_SYS_PTRACE; children get the flag reset by execve, so capsules are unaffected.
The runner does the same for itself (capsule/runner/secrecy.py, which may not import this).
"""

from __future__ import annotations

import ctypes
import sys

PR_SET_DUMPABLE = 4


def make_undumpable() -> bool:
    """prctl(PR_SET_DUMPABLE, 0) on Linux; False where it is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        # CDLL(None): the C library this process already has (find_library would run ldconfig)
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False
