"""Uid allocation and the job_uid_range setting of the local executor's process runtime."""

from __future__ import annotations

import pathlib

import pytest

from common.config import ConfigError
from executor_svc.local.config import LocalConfig
from executor_svc.local.job_users import JobUids, UidRange, drop_privileges


def test_uids_go_round_the_range_skipping_those_in_use(tmp_path: pathlib.Path) -> None:
    uids = JobUids(UidRange(5000, 5003), tmp_path / "job-uids")
    assert [uids.allocate(set()) for _ in range(3)] == [5000, 5001, 5002]
    assert uids.allocate({5003, 5000}) == 5001  # wrapped; 5003 and 5000 still held
    again = JobUids(UidRange(5000, 5003), tmp_path / "job-uids")  # a restarted executor
    assert again.allocate(set()) == 5002
    with pytest.raises(ConfigError, match="all 4 uids are held"):
        again.allocate({5000, 5001, 5002, 5003})


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
