"""`chattr +T` from Python: ext4 spreads the subfolders of a folder so marked over its block
groups. Where the folder's file system has no such flag, the call says so and changes nothing."""

from __future__ import annotations

import array
import fcntl
import os
import pathlib
import subprocess

from common.dir_spread import FS_IOC_GETFLAGS, FS_IOC_SETFLAGS, FS_TOPDIR_FL, spread_subfolders

EXT = {"ext2", "ext3", "ext4"}
FS_NOATIME_FL = 0x00000080


def fs_type(path: pathlib.Path) -> str:
    """The type of the file system `path` is on, from the longest mount point above it."""
    best, kind = "", ""
    real = os.path.realpath(path)
    for line in pathlib.Path("/proc/self/mountinfo").read_text().splitlines():
        left, right = line.split(" - ", 1)
        mount = left.split()[4]
        if (real == mount or real.startswith(mount.rstrip("/") + "/")) and len(mount) >= len(best):
            best, kind = mount, right.split()[0]
    return kind


def flags(path: pathlib.Path) -> int:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        buf = array.array("i", [0])
        fcntl.ioctl(fd, FS_IOC_GETFLAGS, buf, True)
        return buf[0]
    finally:
        os.close(fd)


def test_a_folder_is_marked_the_top_of_hierarchies_and_keeps_its_other_flags(tmp_path: pathlib.Path) -> None:
    top = tmp_path / "attempts"
    top.mkdir()
    if fs_type(top) not in EXT:  # our machines' /tmp is ext4; elsewhere the call must say it could not
        assert spread_subfolders(top) is False
        return
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.ioctl(fd, FS_IOC_SETFLAGS, array.array("i", [flags(top) | FS_NOATIME_FL]), False)
    finally:
        os.close(fd)
    assert not flags(top) & FS_TOPDIR_FL
    assert spread_subfolders(top) is True
    assert flags(top) & FS_TOPDIR_FL
    assert flags(top) & FS_NOATIME_FL
    assert (
        "T" in subprocess.run(["lsattr", "-d", str(top)], capture_output=True, text=True, check=True).stdout.split()[0]
    )
    assert spread_subfolders(top) is True  # again: already marked


def test_where_there_is_no_such_flag_nothing_changes_and_nothing_is_raised(tmp_path: pathlib.Path) -> None:
    shm = pathlib.Path("/dev/shm")
    assert fs_type(shm) == "tmpfs"
    folder = shm / f"sf-dir-spread-{os.getpid()}"
    folder.mkdir()
    try:
        assert spread_subfolders(folder) is False
    finally:
        folder.rmdir()
    assert spread_subfolders(tmp_path / "missing") is False
    (tmp_path / "file").write_text("x")
    assert spread_subfolders(tmp_path / "file") is False
