"""Spreading a folder's subfolders over the file system, where it is ext2/3/4 (`chattr +T`).

ext4 places a new folder in its parent's block group while that group has room (the Orlov
allocator spreads only folders at the top of a hierarchy), and a file's inode in its folder's
group. A folder whose subfolders are many unrelated trees, made and emptied all day (the
executor's `attempts/` and `out/`), then keeps them all in a few groups. Where the file system has
no journal, the kernel will not reuse an inode freed in the last minute (five while it is not
written back) and checks each new inode of a group against every such one: with a thousand
attempts' subtrees deleted in the same few groups, each new file cost 0.1-0.25 ms of kernel CPU
(docs/benchmarks.md, throughput). The "top of directory hierarchies" flag (FS_TOPDIR_FL) makes
ext4 place each subfolder as it places top-level ones: in a group with more free inodes and
blocks than average, so each attempt's tree lands in a group of its own.

Elsewhere (xfs, tmpfs, overlay, a folder we may not change) the flag does not exist or is refused:
nothing changes and nothing is said.
"""

from __future__ import annotations

import array
import fcntl
import os

FS_IOC_GETFLAGS = 0x80086601
FS_IOC_SETFLAGS = 0x40086602
FS_TOPDIR_FL = 0x00020000


def _flags(fd: int) -> int:
    buf = array.array("i", [0])  # the kernel reads and writes an int, whatever the ioctl's name says
    fcntl.ioctl(fd, FS_IOC_GETFLAGS, buf, True)
    return buf[0]


def spread_subfolders(path: str | os.PathLike[str]) -> bool:
    """Mark `path` as the top of directory hierarchies; True when the flag is set (already or now)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        flags = _flags(fd)
        if not flags & FS_TOPDIR_FL:
            fcntl.ioctl(fd, FS_IOC_SETFLAGS, array.array("i", [flags | FS_TOPDIR_FL]), False)
        return bool(_flags(fd) & FS_TOPDIR_FL)
    except OSError:  # ENOTTY or EOPNOTSUPP: not ext2/3/4; EPERM: not ours to change
        return False
    finally:
        os.close(fd)
