"""Install Ray into the Slurm test cluster's chroot, so multi-node jobs can start a Ray cluster.

Real Slurm clusters run multi-node jobs in an image (or on hosts) that already has Ray; the test
cluster's Debian 13 chroot has only `python3` (3.13) and no pip. Ray is therefore installed from
the host, without pip or a venv inside the chroot:

1. `pip download` (the host's pip, from PyPI) fetches Ray and its dependencies as cp313
   manylinux wheels into `build/wheelhouse-ray-<version>-cp313/` (cached; ~80 MB);
2. `pip install --target` unpacks them, still with the host's pip but for the chroot's Python
   (`--python-version 3.13 --only-binary=:all:`), into `<chroot>/opt/starforge-ray/<version>`
   (~330 MB), built in a `.partial` directory and renamed when complete;
3. a `.pth` file in the chroot's `/usr/local/lib/python3.13/dist-packages` puts that directory on
   the chroot Python's path, and `/usr/local/bin/ray` is a tiny wrapper for Ray's CLI.

Idempotent and serialised by a lock file, so concurrent test sessions share one install. The
chroot marker (tools/slurm/chroot.py) is untouched: a rebuilt chroot simply gets Ray again.

    python -m tools.slurm.ray            # install (prints the JSON result)
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import pathlib
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass

from tools.slurm.chroot import REPO_ROOT, default_chroot_dir
from tools.slurm.errors import ClusterError

RAY_VERSION = "2.60.0"
# Wheel tags the chroot's glibc (trixie: 2.41) accepts; Ray itself ships manylinux2014 wheels.
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64", "manylinux1_x86_64")
COMPLETE = ".starforge-ray-complete"
WRAPPER = "#!/usr/bin/python3\nimport sys\n\nfrom ray.scripts.scripts import main\n\nsys.exit(main())\n"


@dataclass(frozen=True)
class RayInstall:
    """Where Ray lives in the chroot and how long installing it took (0 when it was there)."""

    version: str
    python: str
    site_dir: str  # path inside the chroot
    command: str  # the `ray` CLI inside the chroot
    installed_now: bool
    seconds: float


def chroot_python(chroot: pathlib.Path) -> str:
    """`3.13` for the chroot's python3 (a symlink to python3.13 on Debian)."""
    target = (chroot / "usr/bin/python3").readlink() if (chroot / "usr/bin/python3").is_symlink() else None
    name = target.name if target else ""
    if not name.startswith("python3."):
        raise ClusterError(f"cannot tell the Python version of {chroot}/usr/bin/python3 (links to {target})")
    return name.removeprefix("python")


@contextlib.contextmanager
def _locked(path: pathlib.Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _pip(args: list[str], log_path: pathlib.Path) -> None:
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    with log_path.open("a") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        result = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False, timeout=900)
    if result.returncode != 0:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-15:])
        raise ClusterError(f"pip failed with exit code {result.returncode}; see {log_path}:\n{tail}")


def _target_args(py: str) -> list[str]:
    out = ["--only-binary=:all:", "--implementation", "cp", "--python-version", py]
    for platform in PLATFORMS:
        out += ["--platform", platform]
    return out


def ensure_ray(
    chroot: pathlib.Path | None = None,
    *,
    version: str = RAY_VERSION,
    log: Callable[[str], None] = lambda _msg: None,
) -> RayInstall:
    """Ray `version` importable by the chroot's python3 and `ray` on its PATH (see module docstring)."""
    chroot = (chroot or default_chroot_dir()).resolve()
    if not (chroot / "usr/bin/python3").exists() and not (chroot / "usr/bin/python3").is_symlink():
        raise ClusterError(f"{chroot} is not a built chroot (no usr/bin/python3); start a cluster first")
    py = chroot_python(chroot)
    site_rel = f"opt/starforge-ray/{version}"
    site = chroot / site_rel
    pth = chroot / f"usr/local/lib/python{py}/dist-packages/starforge-ray.pth"
    wrapper = chroot / "usr/local/bin/ray"
    build = REPO_ROOT / "build"
    log_path = build / "slurm-ray.install.log"
    started = time.monotonic()
    with _locked(build / "slurm-chroot-ray.lock"):
        installed_now = not (site / COMPLETE).is_file()
        if installed_now:
            wheels = build / f"wheelhouse-ray-{version}-cp{py.replace('.', '')}"
            if not list(wheels.glob(f"ray-{version}-*.whl")):
                log(f"downloading Ray {version} wheels for Python {py} into {wheels} (log: {log_path})")
                _pip(["download", "-d", str(wheels), *_target_args(py), f"ray=={version}"], log_path)
            partial = site.with_name(site.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            log(f"installing Ray {version} into {site}")
            _pip(
                [
                    "install",
                    "--no-index",
                    "--find-links",
                    str(wheels),
                    "--target",
                    str(partial),
                    "--no-compile",
                    *_target_args(py),
                    f"ray=={version}",
                ],
                log_path,
            )
            (partial / COMPLETE).write_text(json.dumps({"version": version, "python": py}) + "\n")
            shutil.rmtree(site, ignore_errors=True)
            partial.rename(site)
        pth.parent.mkdir(parents=True, exist_ok=True)
        pth.write_text(f"/{site_rel}\n")
        wrapper.parent.mkdir(parents=True, exist_ok=True)
        wrapper.write_text(WRAPPER)
        wrapper.chmod(0o755)
    seconds = time.monotonic() - started
    if installed_now:
        log(f"installed Ray {version} in {seconds:.0f} s")
    return RayInstall(
        version=version,
        python=py,
        site_dir=f"/{site_rel}",
        command="/usr/local/bin/ray",
        installed_now=installed_now,
        seconds=round(seconds, 1),
    )


if __name__ == "__main__":
    print(json.dumps(asdict(ensure_ray(log=lambda m: print(m, file=sys.stderr))), indent=2))
