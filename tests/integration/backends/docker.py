"""Session fixtures: a private Docker engine (`dockerd`) and the test image (`python_image`).

dockerd (apt's docker.io) is started as docs/ARCHITECTURE.md ("Real backends on a machine like ours") says: its own --data-root,
--exec-root, --pidfile and --host unix://<dir>/docker.sock, an empty --config-file (the machine's
/etc/docker/daemon.json never applies), and `--bridge=none --iptables=false --ip-forward=false
--ip-masq=false`, so it creates no bridge and no NAT rule; containers use the host network.

The data root is kept in build/dockerd/data (gitignored) so the imported test image survives
between sessions. One session at a time owns it (an flock on build/dockerd/lock); a session that
finds it taken uses a private data root for itself instead (the image is then re-imported from
the cached root file system tarball in seconds). A dockerd left behind by a crashed session is
found through build/dockerd/dockerd.pid and stopped by that PID.

dockerd is stopped by its PID (SIGTERM, wait, SIGKILL), never by name; containers the tests made
are removed first. If dockerd or the image cannot be made, the fixture fails with dockerd's log.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pathlib
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

import docker
import pytest

from tests.integration.backends.workers import claim_backend

ROOT = pathlib.Path(__file__).resolve().parents[3]
BUILD = ROOT / "build"
PERSISTENT = BUILD / "dockerd"
TEST_IMAGE = "starforge-test-python:bookworm"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 20.0


@dataclass
class DockerEngine:
    """A running private dockerd."""

    base_url: str
    pid: int
    data_root: pathlib.Path
    exec_root: pathlib.Path
    log_path: pathlib.Path
    client: docker.DockerClient

    def log_tail(self, lines: int = 40) -> str:
        return _tail(self.log_path, lines)


def _tail(path: pathlib.Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def _cmdline(pid: int) -> list[str]:
    try:
        return pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except (FileNotFoundError, ProcessLookupError):
        return []


def _stop_pid(pid: int, timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM, wait up to `timeout`, SIGKILL; reaps it when it is our child."""

    def gone() -> bool:
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        stat = pathlib.Path(f"/proc/{pid}/stat")
        return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"

    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        if gone():
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and not gone():
            time.sleep(0.1)


def _unmount_under(path: pathlib.Path) -> None:
    """dockerd leaves <exec-root>/netns/default (an nsfs bind mount) behind; unmount what is left."""
    prefix = str(path.resolve()) + "/"
    mounts = [line.split()[1] for line in pathlib.Path("/proc/mounts").read_text().splitlines()]
    for target in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", target], check=False, capture_output=True)


def _stop_stale(pidfile: pathlib.Path, data_root: pathlib.Path) -> None:
    """Stop a dockerd a crashed session left on `data_root` (only if it is really that one)."""
    try:
        pid = int(pidfile.read_text().strip())
    except (FileNotFoundError, ValueError):
        return
    if f"--data-root={data_root}" in _cmdline(pid):
        _stop_pid(pid)
    pidfile.unlink(missing_ok=True)


def _take_data_root(session_dir: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path, IO[str] | None]:
    """(data root, pidfile, lock): the persistent root when free, else a private one."""
    PERSISTENT.mkdir(parents=True, exist_ok=True)
    lock = (PERSISTENT / "lock").open("w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        return session_dir / "data", session_dir / "docker.pid", None
    data_root = PERSISTENT / "data"
    pidfile = PERSISTENT / "dockerd.pid"
    _stop_stale(pidfile, data_root)
    return data_root, pidfile, lock


def start_dockerd(session_dir: pathlib.Path) -> tuple[DockerEngine, IO[str] | None]:
    """Start dockerd and wait for /_ping; pytest.fail with its log when it does not come up."""
    dockerd = shutil.which("dockerd") or ("/usr/sbin/dockerd" if os.path.exists("/usr/sbin/dockerd") else None)
    if dockerd is None:
        pytest.fail("dockerd is not installed: run `make system-deps` (apt-get install docker.io)")
    data_root, pidfile, lock = _take_data_root(session_dir)
    exec_root = session_dir / "exec"
    sock = session_dir / "docker.sock"
    config = session_dir / "daemon.json"
    config.write_text(json.dumps({}))
    log_path = session_dir / "dockerd.log"
    data_root.mkdir(parents=True, exist_ok=True)
    cmd = [
        dockerd,
        f"--config-file={config}",
        f"--data-root={data_root}",
        f"--exec-root={exec_root}",
        f"--pidfile={pidfile}",
        f"--host=unix://{sock}",
        "--bridge=none",
        "--iptables=false",
        "--ip-forward=false",
        "--ip-masq=false",
    ]
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root"}
    with log_path.open("ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    base_url = f"unix://{sock}"
    deadline = time.monotonic() + START_TIMEOUT
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            client = docker.DockerClient(base_url=base_url, timeout=120, max_pool_size=32)
            if client.ping():
                engine = DockerEngine(base_url, proc.pid, data_root, exec_root, log_path, client)
                return engine, lock
        except Exception as exc:
            last_error = exc
        time.sleep(0.2)
    _stop_pid(proc.pid)
    _unmount_under(exec_root)
    pytest.fail(
        f"dockerd did not answer /_ping within {START_TIMEOUT:.0f}s "
        f"(exit code {proc.poll()}, last error {last_error}); its log {log_path}:\n{_tail(log_path)}"
    )


def remove_test_containers(client: docker.DockerClient) -> None:
    """Remove the containers tests made (this engine is private: all StarForge-labelled ones)."""
    for c in client.containers.list(
        all=True, filters={"label": "starforge.dev/managed-by=starforge"}, ignore_removed=True
    ):
        with contextlib.suppress(docker.errors.NotFound):
            c.remove(force=True)


def stop_dockerd(engine: DockerEngine) -> None:
    with contextlib.suppress(Exception):
        remove_test_containers(engine.client)
    engine.client.close()
    containerd_pidfile = engine.exec_root / "containerd" / "containerd.pid"
    _stop_pid(engine.pid)
    # dockerd stops its containerd; a SIGKILLed dockerd cannot, so stop that one by its PID too.
    with contextlib.suppress(FileNotFoundError, ValueError):
        pid = int(containerd_pidfile.read_text().strip())
        if any("containerd" in part for part in _cmdline(pid)[:1]):
            _stop_pid(pid)
    _unmount_under(engine.exec_root)


@pytest.fixture(scope="session")
def dockerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockerEngine]:
    """A private dockerd for the session (see module docstring)."""
    claim_backend("docker", tmp_path_factory.getbasetemp())
    session_dir = tmp_path_factory.mktemp("dockerd")
    engine, lock = start_dockerd(session_dir)
    try:
        remove_test_containers(engine.client)  # left by a crashed session on the persistent root
        yield engine
    finally:
        stop_dockerd(engine)
        if lock is not None:
            lock.close()
        else:
            shutil.rmtree(engine.data_root, ignore_errors=True)


def ensure_test_image(engine: DockerEngine) -> str:
    """Build/import starforge-test-python:bookworm with tools/build_test_image.sh (once)."""
    env = dict(os.environ, DOCKER_HOST=engine.base_url, STARFORGE_BUILD=str(BUILD))
    started = time.monotonic()
    proc = subprocess.run(
        [str(ROOT / "tools" / "build_test_image.sh")], env=env, capture_output=True, text=True, timeout=900
    )
    if proc.returncode != 0:
        pytest.fail(
            f"tools/build_test_image.sh failed (exit {proc.returncode}) after {time.monotonic() - started:.0f}s:\n"
            f"{proc.stdout}\n{proc.stderr}\ndockerd log:\n{engine.log_tail()}"
        )
    try:
        engine.client.images.get(TEST_IMAGE)
    except docker.errors.ImageNotFound:
        pytest.fail(f"{TEST_IMAGE} is still missing after tools/build_test_image.sh:\n{proc.stderr}")
    return TEST_IMAGE


@pytest.fixture(scope="session")
def python_image(dockerd: DockerEngine) -> str:
    """The name of the image with Python the docker-runtime tests run capsules in."""
    return ensure_test_image(dockerd)
