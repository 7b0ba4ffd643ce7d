"""The Slurm test cluster's init starts its slurmds one at a time (tools/slurm/nsinit.py).

Every slurmd removes /run/slurm/sack.socket and binds it again as it starts; two at once can
both remove it before either binds, and the second then exits with "Address already in use"
(seen in a benchmark's cluster start). `_await_sack` holds the next daemon back until the one
just started has bound the path anew. Real processes binding real sockets.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import time

from tools.slurm import nsinit

BIND_LATER = """
import socket, sys, time
time.sleep(float(sys.argv[2]))
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
time.sleep(30)
"""


def _root(tmp_path: pathlib.Path) -> pathlib.Path:
    (tmp_path / "run" / "slurm").mkdir(parents=True)
    return tmp_path


def _binder(root: pathlib.Path, after: float) -> subprocess.Popen[bytes]:
    path = root / "run" / "slurm" / "sack.socket"
    path.unlink(missing_ok=True)  # as slurmd does first
    return subprocess.Popen([sys.executable, "-c", BIND_LATER, str(path), str(after)])


def test_the_next_daemon_waits_until_the_socket_is_bound_anew(tmp_path: pathlib.Path) -> None:
    root = _root(tmp_path)
    first = _binder(root, 0.0)
    try:
        nsinit._await_sack(str(root), first, None)
        before = nsinit._sack(str(root))
        assert before is not None
        second = _binder(root, 0.3)
        try:
            started = time.monotonic()
            nsinit._await_sack(str(root), second, before)  # the first one's socket does not count
            assert time.monotonic() - started >= 0.25
            assert nsinit._sack(str(root)) not in (None, before)
        finally:
            second.kill()
            second.wait()
    finally:
        first.kill()
        first.wait()


def test_a_daemon_that_exits_is_not_waited_for(tmp_path: pathlib.Path) -> None:
    root = _root(tmp_path)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    started = time.monotonic()
    nsinit._await_sack(str(root), gone, None)
    assert time.monotonic() - started < nsinit.SACK_WAIT_S / 2
    assert nsinit._sack(str(root)) is None
