"""An ended pre-forked runner whose exit code its zygote has not written yet still runs, as far as
the process runtime is concerned; an ended `sh` wrapper never does (executor_svc/local/
process_runtime.py). Real child processes, ended and not reaped: the zombies the kernel keeps.
"""

from __future__ import annotations

import json
import os
import pathlib
import time

import pytest

from executor_svc.local.process_runtime import ProcessRuntime, start_ticks
from executor_svc.local.records import AttemptRecord, Layout


def _zombie() -> int:
    """A child of this process that has ended and that nobody reaped yet."""
    pid = os.posix_spawn("/bin/sh", ["sh", "-c", "exit 0"], {})
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # ended, still waitable
    return pid


def _record(pid: int, *, preforked: bool) -> AttemptRecord:
    record = AttemptRecord("jz.1", "jz", 1, "process", "cpu", [], "n1", "", time.time(), preforked=preforked)
    record.pid, record.pid_start, record.handle = pid, start_ticks(pid), str(pid)
    return record


@pytest.mark.parametrize(("preforked", "running"), [(True, True), (False, False)])
def test_an_unreaped_runner_runs_only_when_a_zygote_forked_it(
    tmp_path: pathlib.Path, preforked: bool, running: bool
) -> None:
    runtime = ProcessRuntime(Layout(tmp_path), preforked=False)
    pid = _zombie()
    try:
        record = _record(pid, preforked=preforked)
        assert record.pid_start > 0
        assert runtime._running(record) is running
    finally:
        os.waitpid(pid, 0)
    # reaped: gone for both, and the record's start time keeps a reused pid from counting
    assert runtime._running(record) is False


def test_the_flag_survives_the_record_on_disk(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "attempt.json"
    _record(os.getpid(), preforked=True).save(path)
    loaded = AttemptRecord.load(path)
    assert loaded is not None and loaded.preforked is True
    doc = json.loads(path.read_text())
    del doc["preforked"]  # as a release before the flag wrote it
    path.write_text(json.dumps(doc))
    older = AttemptRecord.load(path)
    assert older is not None and older.preforked is False
