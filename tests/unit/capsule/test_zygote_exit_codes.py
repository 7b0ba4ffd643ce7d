"""The pre-forked runner's zygote writes each attempt's exit code (capsule/runner/zygote.py).

One fork per attempt: the zygote (root) is the runner's parent and what used to be its wrapper.
It writes the exit code from the kernel's status, as `sh` says it (128 + the signal's number for
a signal), into the attempt's directory through the descriptor the runner sent it, then reaps the
runner. Real child processes; the directory is known only by its descriptor.
"""

from __future__ import annotations

import os
import pathlib
import signal

import pytest

from capsule.runner import zygote


@pytest.fixture(autouse=True)
def _no_attempts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zygote, "_ATTEMPTS", {})


def _ended(script: str, folder: pathlib.Path) -> os.waitid_result:
    """A child running `script` under sh, registered with `folder`'s descriptor as the zygote
    registers a runner, once it has ended (still a zombie: waited for without reaping)."""
    pid = os.posix_spawn("/bin/sh", ["sh", "-c", script], {})
    zygote._ATTEMPTS[pid] = os.open(folder, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW)
    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    assert info is not None and info.si_pid == pid
    return info


def _reaped(pid: int) -> bool:
    return not pathlib.Path(f"/proc/{pid}").exists()


@pytest.mark.parametrize(
    ("script", "code"),
    [("exit 0", 0), ("exit 3", 3), ("kill -9 $$", 128 + signal.SIGKILL), ("kill -TERM $$", 128 + signal.SIGTERM)],
)
def test_the_exit_code_is_written_through_the_descriptor_then_the_child_reaped(
    tmp_path: pathlib.Path, script: str, code: int
) -> None:
    folder = tmp_path / "attempt"
    folder.mkdir()
    info = _ended(script, folder)
    assert not _reaped(info.si_pid)  # a zombie until its exit code is written
    zygote._record(info)
    assert (folder / "exit_code").read_text() == f"{code}\n"
    assert sorted(p.name for p in folder.iterdir()) == ["exit_code"]  # the temporary file renamed
    assert _reaped(info.si_pid)
    assert zygote._ATTEMPTS == {}  # the descriptor closed and forgotten


def test_the_directory_is_the_one_opened_even_after_a_rename(tmp_path: pathlib.Path) -> None:
    """The zygote holds no name: the code goes where the descriptor points, not to a path that
    someone swapped since."""
    folder = tmp_path / "attempt"
    folder.mkdir()
    info = _ended("exit 7", folder)
    folder.rename(tmp_path / "moved")
    folder.mkdir()  # a new folder at the old name gets nothing
    zygote._record(info)
    assert (tmp_path / "moved" / "exit_code").read_text() == "7\n"
    assert list(folder.iterdir()) == []


def test_a_child_that_sent_no_directory_is_reaped_without_a_code(tmp_path: pathlib.Path) -> None:
    pid = os.posix_spawn("/bin/sh", ["sh", "-c", "exit 5"], {})
    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    assert info is not None
    zygote._record(info)
    assert _reaped(pid)
    assert list(tmp_path.iterdir()) == []
