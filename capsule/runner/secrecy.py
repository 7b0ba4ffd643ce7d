"""Keep the run token from the training command, which runs as the same user as the runner.

The executor writes the token to a file (mode 0600) in the attempt's scratch directory and passes
only its path (FORGE_INGEST_TOKEN_FILE): a token in the runner's environment would stay readable
in /proc/<runner>/environ for as long as the runner lives. The runner first makes itself
non-dumpable, so that same-user processes can read neither its memory, nor its environment, nor
its file descriptors under /proc, nor attach to it with ptrace; then it reads the file and deletes
it before the training command starts.
"""

from __future__ import annotations

import ctypes
import os
import pathlib
import sys

from .errors import RunnerConfigError

PR_SET_DUMPABLE = 4
MAX_TOKEN_BYTES = 4096


def make_undumpable() -> bool:
    """prctl(PR_SET_DUMPABLE, 0) on Linux; False where it is not available (other systems)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        # CDLL(None): the C library this process already has (find_library would run ldconfig)
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def take_token(path: pathlib.Path) -> str:
    """Read the run token from `path` and delete the file (nobody else may read it later)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise RunnerConfigError(f"cannot read the run token file {path}: {exc.strerror or exc}") from None
    try:
        raw = os.read(fd, MAX_TOKEN_BYTES)
    finally:
        os.close(fd)
        try:
            os.unlink(path)
        except OSError as exc:
            raise RunnerConfigError(f"cannot delete the run token file {path}: {exc.strerror or exc}") from None
    token = raw.decode("ascii", errors="replace").strip()
    if not token:
        raise RunnerConfigError(f"the run token file {path} is empty")
    return token
