"""Uid allocation and the job_uid_range setting of the local executor's process runtime."""

from __future__ import annotations

import pathlib

import pytest

from common.config import ConfigError
from executor_svc.local.config import LocalConfig
from executor_svc.local.job_users import UID_RESERVE, JobUids, UidRange, drop_privileges


def test_uids_go_round_the_range_skipping_those_in_use(tmp_path: pathlib.Path) -> None:
    uids = JobUids(UidRange(5000, 5003), tmp_path / "job-uids")
    assert [uids.allocate(set()) for _ in range(3)] == [5000, 5001, 5002]
    assert uids.allocate({5003, 5000}) == 5001  # wrapped; 5003 and 5000 still held
    again = JobUids(UidRange(5000, 5003), tmp_path / "job-uids")  # a restarted executor
    assert again.allocate(set()) == 5002
    with pytest.raises(ConfigError, match="all 4 uids are held"):
        again.allocate({5000, 5001, 5002, 5003})


def test_the_next_uid_is_written_ahead_not_at_every_launch(tmp_path: pathlib.Path) -> None:
    """job-uids is rewritten once per UID_RESERVE launches (each rewrite is a new inode), and a
    restarted executor never hands out a uid this cycle already gave."""
    state = tmp_path / "job-uids"
    uids = JobUids(UidRange(200000, 265535), state)
    writes, inode, given = 0, None, []
    for _ in range(1000):
        given.append(uids.allocate(set()))
        if state.stat().st_ino != inode:
            writes, inode = writes + 1, state.stat().st_ino
    assert given == list(range(200000, 201000))
    assert writes == -(-1000 // (UID_RESERVE + 1))  # 16: one per UID_RESERVE + 1 uids
    for _ in range(3):  # restarts: each starts past what the last one handed out
        again = JobUids(UidRange(200000, 265535), state)
        first = again.allocate(set())
        assert given[-1] < first <= given[-1] + UID_RESERVE + 1
        given.append(first)


def test_a_small_range_is_written_at_every_launch(tmp_path: pathlib.Path) -> None:
    """Under 8 uids nothing is reserved: a restart skips none of them."""
    uids = JobUids(UidRange(5000, 5006), tmp_path / "job-uids")
    for expected in range(5000, 5007):
        assert uids.allocate(set()) == expected
        assert JobUids(UidRange(5000, 5006), tmp_path / "job-uids").allocate(set()) == (expected + 1 - 5000) % 7 + 5000


@pytest.mark.parametrize(
    ("value", "message"),
    [([0, 10], "from 1000 up"), ([200000], "two uids"), ([300000, 200000], "ascending"), ([True, 5], "two uids")],
)
def test_bad_ranges_are_refused(value: list[int], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        LocalConfig(job_uid_range=value)


def test_the_job_side_drops_every_privilege() -> None:
    assert drop_privileges(200001) == [
        "setpriv",
        "--reuid=200001",
        "--regid=200001",
        "--clear-groups",
        "--no-new-privs",
    ]
