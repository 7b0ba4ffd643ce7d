"""Build and cache the Debian 13 (trixie) chroot that the Slurm 24.11 daemons run from.

Why a chroot: Debian 12 (our machines) packages Slurm 22.05, whose slurmrestd speaks only API
v0.0.38; trixie packages 24.11 (data_parser v0.0.40-v0.0.42). `debootstrap --variant=minbase`
makes one in about 45 s, so it is built once under the repo's gitignored `build/` and reused.

A chroot is used only when it is *complete*: it is built in a `.partial` directory and renamed into
place after a marker file recording the recipe was written, so an interrupted build is never
mistaken for a good one. A chroot whose marker is missing or records another recipe is rebuilt.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pathlib
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tools.slurm.errors import ClusterError

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
SUITE = "trixie"
# python3: jobs run `sh <staging>/capsule/bootstrap.sh`, which needs the image's own Python.
PACKAGES = ("slurm-wlm", "slurmrestd", "munge", "slurm-wlm-jwt-plugin", "python3")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
MARKER = ".starforge-chroot.json"
# Bump when the build recipe changes: every cached chroot with another value is rebuilt.
RECIPE_VERSION = 1

# The unprivileged user jobs run as (slurmrestd refuses root, and real clusters never run jobs as
# root). A fixed uid keeps files the jobs write into the staging directory stable across rebuilds.
JOB_USER = "starforge"
JOB_UID = 64101
JOB_GID = 64101
# Unix users of their own for two tenants (the executor's `tenants` mapping): jobs of one cannot
# read or write the other's files. Added to every chroot when it is used, not only when built.
TENANT_USERS = {"sf-tenant-a": 64102, "sf-tenant-b": 64103}

_REQUIRED = (
    "usr/sbin/slurmctld",
    "usr/sbin/slurmd",
    "usr/sbin/slurmrestd",
    "usr/bin/scontrol",
    "usr/bin/srun",
    "usr/bin/python3",
    "etc/slurm",
)


@dataclass(frozen=True)
class Chroot:
    """A complete chroot and what was found in it."""

    path: pathlib.Path
    slurm_version: str
    built_now: bool
    build_seconds: float


def default_chroot_dir() -> pathlib.Path:
    """`build/slurm-chroot` in the repository (gitignored), shared by every cluster of this clone."""
    return REPO_ROOT / "build" / "slurm-chroot"


def _marker_payload() -> dict[str, object]:
    return {"recipe": RECIPE_VERSION, "suite": SUITE, "packages": list(PACKAGES), "job_uid": JOB_UID}


def problem_with(path: pathlib.Path) -> str | None:
    """Why `path` is not a usable chroot, or None when it is complete."""
    marker = path / MARKER
    if not marker.is_file():
        return f"{path} has no {MARKER} (missing or an interrupted build)"
    try:
        recorded = json.loads(marker.read_text())
    except (OSError, ValueError) as exc:
        return f"{marker} is unreadable: {exc}"
    expected = _marker_payload()
    if any(recorded.get(key) != value for key, value in expected.items()):
        return f"{path} was built by another recipe ({recorded}); expected {expected}"
    # lexists: the daemons are absolute symlinks into the chroot's /etc/alternatives.
    missing = [rel for rel in _REQUIRED if not os.path.lexists(path / rel)]
    if not list(path.glob("usr/lib/*/slurm-wlm/auth_jwt.so")):
        missing.append("usr/lib/*/slurm-wlm/auth_jwt.so")
    if missing:
        return f"{path} lacks {', '.join(missing)}"
    return None


def slurm_version(path: pathlib.Path) -> str:
    """The installed slurm-wlm package version, read from the chroot's dpkg database."""
    status = (path / "var/lib/dpkg/status").read_text(errors="replace")
    for stanza in status.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and not line.startswith(" "))
        if fields.get("Package") == "slurm-wlm" and "install ok installed" in fields.get("Status", ""):
            return fields.get("Version", "")
    raise ClusterError(f"slurm-wlm is not installed in {path}")


@contextlib.contextmanager
def _locked(path: pathlib.Path) -> Iterator[None]:
    """Serialise builds: two test sessions starting at once must not debootstrap the same dir."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _mounted_under(path: pathlib.Path) -> list[str]:
    """Mount points under `path` visible to this process (a chroot with mounts must not be deleted)."""
    prefix = str(path.resolve()) + "/"
    points = []
    with open("/proc/self/mountinfo") as mountinfo:
        for line in mountinfo:
            point = line.split()[4]
            if point.startswith(prefix):
                points.append(point)
    return points


def _add_user(root: pathlib.Path, name: str, uid: int, gid: int, comment: str) -> None:
    """Add a user (and its group) to the chroot's passwd/group files (slurmd resolves job uids there)."""
    passwd = root / "etc/passwd"
    group = root / "etc/group"
    if f"\n{name}:" not in "\n" + passwd.read_text():
        with passwd.open("a") as handle:
            handle.write(f"{name}:x:{uid}:{gid}:{comment}:/tmp:/bin/sh\n")
    if f"\n{name}:" not in "\n" + group.read_text():
        with group.open("a") as handle:
            handle.write(f"{name}:x:{gid}:\n")


def _add_job_user(root: pathlib.Path) -> None:
    _add_user(root, JOB_USER, JOB_UID, JOB_GID, "StarForge jobs")


def add_tenant_users(root: pathlib.Path) -> None:
    """The tenants' users (uid = gid), idempotent: chroots built before they existed get them too."""
    for name, uid in TENANT_USERS.items():
        _add_user(root, name, uid, uid, f"StarForge tenant {name}")


def _build(path: pathlib.Path, mirror: str, log: Callable[[str], None]) -> float:
    partial = path.with_name(path.name + ".partial")
    build_log = path.with_name(path.name + ".build.log")
    for stale in (partial, path):
        if stale.exists():
            if mounts := _mounted_under(stale):
                raise ClusterError(f"cannot rebuild {stale}: still mounted at {', '.join(mounts)}")
            shutil.rmtree(stale)
    if shutil.which("debootstrap") is None:
        raise ClusterError("debootstrap is not installed: run `make system-deps` (apt-get install debootstrap)")
    command = [
        "debootstrap",
        "--variant=minbase",
        f"--include={','.join(PACKAGES)}",
        SUITE,
        str(partial),
        mirror,
    ]
    log(f"building the Slurm chroot: {' '.join(command)} (log: {build_log})")
    started = time.monotonic()
    with open(build_log, "w") as out:
        result = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False)
    if result.returncode != 0:
        tail = "\n".join(build_log.read_text(errors="replace").splitlines()[-15:])
        raise ClusterError(f"debootstrap failed with exit code {result.returncode}; see {build_log}:\n{tail}")
    _add_job_user(partial)
    (partial / "etc/slurm").mkdir(parents=True, exist_ok=True)
    # The downloaded .debs are ~100 MB that nothing reads again.
    for deb in (partial / "var/cache/apt/archives").glob("*.deb"):
        deb.unlink()
    seconds = time.monotonic() - started
    payload = _marker_payload() | {"slurm_version": slurm_version(partial), "build_seconds": round(seconds, 1)}
    (partial / MARKER).write_text(json.dumps(payload, indent=2) + "\n")
    if problem := problem_with(partial):
        raise ClusterError(f"the freshly built chroot is incomplete: {problem}; see {build_log}")
    os.rename(partial, path)
    log(f"built the Slurm chroot in {seconds:.0f} s: {path}")
    return seconds


def ensure_chroot(
    path: pathlib.Path | None = None,
    *,
    mirror: str | None = None,
    log: Callable[[str], None] = lambda _msg: None,
) -> Chroot:
    """Return a complete chroot at `path`, building it first when it is missing or incomplete.

    `mirror` defaults to `$STARFORGE_DEBIAN_MIRROR` or deb.debian.org.
    """
    path = (path or default_chroot_dir()).resolve()
    with _locked(path):
        problem = problem_with(path)
        seconds = 0.0
        if problem is not None:
            if path.exists():
                log(f"rebuilding the Slurm chroot: {problem}")
            seconds = _build(path, mirror or os.environ.get("STARFORGE_DEBIAN_MIRROR", DEFAULT_MIRROR), log)
        add_tenant_users(path)
        return Chroot(
            path=path, slurm_version=slurm_version(path), built_now=problem is not None, build_seconds=seconds
        )
