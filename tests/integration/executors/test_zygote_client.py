"""The executor's side of the pre-forked runner (executor_svc/local/zygote.py) against zygotes that
misbehave: a real child process speaking the same line protocol (a stand-in for
`sfrunner.zygote:serve`, started the same way: `<venv>/bin/python -I <venv>/pex`) that answers
late, answers garbage, or takes an attempt's spec and dies before it answers.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import sys
import time
from collections.abc import AsyncIterator

import pytest

from executor_svc.local.zygote import SPEC_DIR, Zygotes, ZygoteSpec, _write_private

STAND_IN = r"""
import os, sys, time
specs = os.environ["FORGE_ZYGOTE_SPECS"]
print("ready", flush=True)
for line in sys.stdin:
    name = line.strip()
    behaviour = open(os.path.join(specs, name)).read() if os.path.exists(os.path.join(specs, name)) else ""
    if '"slow"' in behaviour:
        time.sleep(1.0)
        print(4242, flush=True)
    elif '"garbage"' in behaviour:
        print("error not today", flush=True)
    elif '"tell-bootstrap"' in behaviour:  # tells what the executor set for it
        with open(os.path.join(specs, name + ".env"), "w") as f:
            f.write(os.environ.get("FORGE_ZYGOTE_BOOTSTRAP", "(unset)"))
        print(4444, flush=True)
    elif '"claim"' in behaviour:
        os.unlink(os.path.join(specs, name))  # what a wrapper does once it read the spec
        os._exit(1)
    else:
        print(4343, flush=True)
# input ended: a zygote with attempts still running stays until they end (here: until `linger` goes)
while os.path.exists(os.path.join(specs, "linger")):
    time.sleep(0.05)
"""


def _venv(tmp: pathlib.Path) -> str:
    venv = tmp / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    (venv / "pex").write_text(STAND_IN)
    return str(venv)


def _spec(tmp: pathlib.Path, behaviour: str) -> ZygoteSpec:
    return ZygoteSpec(tmp, tmp / "log", tmp, -1, {"BEHAVIOUR": behaviour})


@pytest.fixture
async def zygotes(tmp_path: pathlib.Path) -> AsyncIterator[Zygotes]:
    """The executor's zygotes for a state dir of the test's own, closed after it."""
    z = Zygotes(tmp_path)
    try:
        yield z
    finally:
        await z.close()


async def test_an_answer_and_the_spec_directory(zygotes: Zygotes, tmp_path: pathlib.Path) -> None:
    assert await zygotes.fork(_venv(tmp_path), _spec(tmp_path, "plain")) == 4343
    specs = tmp_path / SPEC_DIR
    assert specs.stat().st_mode & 0o777 == 0o700
    assert [p.stat().st_mode & 0o777 for p in specs.iterdir()] == [0o600]  # the stand-in leaves it


@pytest.mark.parametrize("bootstrap", [None, "capsule/bootstrap.sh"])
async def test_the_zygote_is_told_the_bootstrap_to_compile_once(tmp_path: pathlib.Path, bootstrap: str | None) -> None:
    zygotes = Zygotes(tmp_path, bootstrap=tmp_path / bootstrap if bootstrap else None)
    try:
        assert await zygotes.fork(_venv(tmp_path), _spec(tmp_path, "tell-bootstrap")) == 4444
        [told] = (tmp_path / SPEC_DIR).glob("*.env")
        assert told.read_text() == (str(tmp_path / bootstrap) if bootstrap else "(unset)")
    finally:
        await zygotes.close()


async def test_a_garbled_answer_gives_the_attempt_back(zygotes: Zygotes, tmp_path: pathlib.Path) -> None:
    venv = _venv(tmp_path)
    assert await zygotes.fork(venv, _spec(tmp_path, "garbage")) is None  # start it the usual way
    assert list((tmp_path / SPEC_DIR).iterdir()) == []  # its spec (and secrets) deleted
    # and the venv gets no new zygote at once: the next attempt also goes the usual way
    assert await zygotes.fork(venv, _spec(tmp_path, "plain")) is None


async def test_a_spec_taken_before_the_zygote_died_stays_taken(zygotes: Zygotes, tmp_path: pathlib.Path) -> None:
    # a wrapper has the attempt: its pid will come from wrapper.pid; never a second start
    assert await zygotes.fork(_venv(tmp_path), _spec(tmp_path, "claim")) == 0


async def test_a_cancelled_fork_leaves_no_answer_for_the_next_one(zygotes: Zygotes, tmp_path: pathlib.Path) -> None:
    venv = _venv(tmp_path)
    slow = asyncio.ensure_future(zygotes.fork(venv, _spec(tmp_path, "slow")))
    await asyncio.sleep(0.3)
    slow.cancel()
    with pytest.raises(asyncio.CancelledError):
        await slow
    # the late 4242 must not become this attempt's pid: that zygote was killed, a new one answers
    assert await zygotes.fork(venv, _spec(tmp_path, "plain")) == 4343


async def test_close_ends_the_zygote(tmp_path: pathlib.Path) -> None:
    zygotes = Zygotes(tmp_path)
    assert await zygotes.fork(_venv(tmp_path), _spec(tmp_path, "plain")) == 4343
    pids = [z.pid for z in zygotes._zygotes.values()]
    assert pids
    assert all(pid is not None for pid in pids)
    await zygotes.close()
    for pid in pids:
        assert pid is not None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


async def test_close_leaves_a_zygote_that_still_runs_attempts(tmp_path: pathlib.Path) -> None:
    """Closing the executor ends the zygote's input; one whose attempts still run stays to write
    their exit codes, and is reaped when it leaves."""
    zygotes = Zygotes(tmp_path)
    assert await zygotes.fork(_venv(tmp_path), _spec(tmp_path, "plain")) == 4343
    (linger := tmp_path / SPEC_DIR / "linger").touch()
    [pid] = [z.pid for z in zygotes._zygotes.values()]
    assert pid is not None
    started = time.monotonic()
    await zygotes.close()
    assert time.monotonic() - started < 10.0  # it waited a moment, not for the attempts
    os.kill(pid, 0)  # still there
    assert await _reaped(pid, within=0.3) is False
    linger.unlink()
    assert await _reaped(pid), f"the zygote {pid} did not leave once its attempts had ended"


async def _reaped(pid: int, within: float = 10.0) -> bool:
    """The process `pid` is gone (killed and reaped: a zombie still answers signal 0)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        await asyncio.sleep(0.05)
    return False


async def test_an_idle_zygote_of_another_venv_is_stopped(tmp_path: pathlib.Path) -> None:
    # after an upgrade of the runner the old venv's zygote is never asked again: it must not keep
    # its memory until the executor stops
    zygotes = Zygotes(tmp_path, idle_seconds=0.5)
    try:
        old, new = _venv(tmp_path / "old"), _venv(tmp_path / "new")
        assert await zygotes.fork(old, _spec(tmp_path, "plain")) == 4343
        old_pid = zygotes._zygotes[old].pid
        assert old_pid is not None
        assert await zygotes.fork(new, _spec(tmp_path, "plain")) == 4343
        assert zygotes._zygotes[old].pid == old_pid  # used a moment ago: kept
        await asyncio.sleep(0.7)
        assert await zygotes.fork(new, _spec(tmp_path, "plain")) == 4343  # idle as long: kept, it is asked
        assert old not in zygotes._zygotes
        assert await _reaped(old_pid), f"the idle zygote {old_pid} is still there"
        new_pid = zygotes._zygotes[new].pid
        assert new_pid is not None and await _reaped(new_pid, within=0.2) is False
        # the old venv asked again: a zygote of its own again
        assert await zygotes.fork(old, _spec(tmp_path, "plain")) == 4343
        assert zygotes._zygotes[old].pid not in (None, old_pid)
    finally:
        await zygotes.close()


def test_a_spec_takes_its_inode_in_the_attempts_folder(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The spec is an unnamed file made in the attempt's folder and linked into the spec directory:
    the spec directory's block group never gets an inode per attempt (`_write_private`)."""
    attempt, specs = tmp_path / "attempts" / "a.1", tmp_path / SPEC_DIR
    attempt.mkdir(parents=True)
    specs.mkdir(mode=0o700)
    opened: list[tuple[str, int]] = []
    real_open = os.open

    def recording_open(path: str | os.PathLike[str], flags: int, *args: int, **kw: int) -> int:
        opened.append((str(path), flags))
        return real_open(path, flags, *args, **kw)

    monkeypatch.setattr(os, "open", recording_open)
    _write_private(specs / "1.1", b'{"secret": 1}', attempt)
    monkeypatch.undo()
    # the unnamed file, then the spec directory to link it into: no spec opened by its name
    assert opened == [
        (str(attempt), os.O_TMPFILE | os.O_WRONLY),
        (str(specs), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW),
    ]
    spec = specs / "1.1"
    assert spec.read_bytes() == b'{"secret": 1}'
    assert spec.stat().st_mode & 0o777 == 0o600 and spec.stat().st_nlink == 1
    assert list(attempt.iterdir()) == []  # nothing named in the attempt's folder
    with pytest.raises(FileExistsError):  # never over another spec
        _write_private(spec, b"{}", attempt)


def test_a_spec_is_made_in_place_where_the_attempts_folder_cannot_take_it(tmp_path: pathlib.Path) -> None:
    specs = tmp_path / SPEC_DIR
    specs.mkdir(mode=0o700)
    _write_private(specs / "1.2", b"{}", tmp_path / "no-such-folder")
    assert (specs / "1.2").read_bytes() == b"{}"
    assert (specs / "1.2").stat().st_mode & 0o777 == 0o600
