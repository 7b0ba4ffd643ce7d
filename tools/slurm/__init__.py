"""A real Slurm 24.11 test cluster on one host, started and stopped by the project itself.

Debian 12 ships Slurm 22.05 (REST API v0.0.38 only), so the daemons run from a cached Debian 13
chroot (`chroot.py`). Each cluster lives in its own PID + mount namespace (`nsinit.py`), so that
stopping it (`cluster.py`) kills exactly what it started and leaves no mounts behind. See README.md.
"""
