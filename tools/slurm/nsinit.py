"""PID 1 of one test cluster's private PID + mount namespace (run by `cluster.start` via `unshare`).

Why a namespace: Slurm forks job steps (slurmstepd and the job's own processes) that outlive the
daemons that started them. As PID 1 of the cluster's own PID namespace, this process is the one
thing `stop` has to kill: when it exits the kernel kills every process left in the namespace, and
the mounts below (private to the mount namespace) disappear with it, even after a crash.

It mounts proc, dev, sys, a private /tmp and /run, the run directory (at its own path), the run
directory's etc/ (over /etc/slurm) and a hosts file (over /etc/hosts) into the chroot, starts the
daemons described in its JSON config, writes their namespace PIDs to `report`, then reaps
children until SIGTERM, on which it stops the daemons (SIGTERM, then SIGKILL after
`stop_timeout`) and exits.

Stdlib only and run by path (`python -I nsinit.py CONFIG`): it must not import the project.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
from typing import Any


class _Stop(Exception):
    """Raised by the SIGTERM handler to leave the reaping loop."""


def _log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} nsinit: {message}", flush=True)


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def _makedirs_recorded(path: str) -> list[str]:
    """mkdir -p, returning the directories that did not exist (outermost first)."""
    created: list[str] = []
    parts = path.strip("/").split("/")
    current = ""
    for part in parts:
        current += "/" + part
        if not os.path.isdir(current):
            os.mkdir(current, 0o755)
            created.append(current)
    return created


def _mount_all(config: dict[str, Any]) -> list[str]:
    root = config["chroot"]
    run_dir = config["run_dir"]
    _mount("-t", "proc", "proc", f"{root}/proc")  # a proc of *this* PID namespace
    _mount("--rbind", "/dev", f"{root}/dev")
    _mount("--rbind", "/sys", f"{root}/sys")
    # Jobs write /tmp; keep that out of the shared cached chroot.
    _mount("-t", "tmpfs", "-o", "mode=1777,size=1g", "tmpfs", f"{root}/tmp")
    # /run too; and /run/slurm made up front: two slurmd creating it at once makes one of them fail.
    _mount("-t", "tmpfs", "-o", "mode=0755,size=64m", "tmpfs", f"{root}/run")
    os.mkdir(f"{root}/run/slurm", 0o755)
    created = _makedirs_recorded(root + run_dir)
    _mount("--bind", run_dir, root + run_dir)
    _mount("--bind", config["etc"], f"{root}/etc/slurm")
    # /etc/hosts that names this host: srun tells slurmctld its host name to reply to, and an
    # unresolvable name stalls slurmctld ~10 s per heterogeneous-job step (getaddrinfo retries).
    _mount("--bind", config["hosts"], f"{root}/etc/hosts")
    return created


def _spawn(config: dict[str, Any], daemon: dict[str, Any]) -> subprocess.Popen[bytes]:
    command = ["chroot"]
    if daemon.get("userspec"):
        command.append(f"--userspec={daemon['userspec']}")
    command += [config["chroot"], *daemon["argv"]]
    with open(daemon["log"], "ab") as out:
        return subprocess.Popen(command, env=daemon["env"], stdout=out, stderr=subprocess.STDOUT, cwd="/")


SACK_WAIT_S = 5.0  # how long a slurmd is given to bind its auth socket before the next one starts


def _sack(root: str) -> int | None:
    """The inode of the socket at /run/slurm/sack.socket, None when there is none."""
    with contextlib.suppress(FileNotFoundError):
        st = os.lstat(f"{root}/run/slurm/sack.socket")
        if stat.S_ISSOCK(st.st_mode):
            return st.st_ino
    return None


def _await_sack(root: str, proc: subprocess.Popen[bytes], before: int | None) -> None:
    """Wait until the slurmd just started has bound /run/slurm/sack.socket anew (a socket other
    than `before` is there), or it ended, or SACK_WAIT_S passed. Every slurmd removes that path
    and binds it again as it starts; two doing so at once can both remove it before either binds,
    and the second bind then fails with "Address already in use" and that slurmd exits. One at a
    time, the later one takes the path."""
    deadline = time.monotonic() + SACK_WAIT_S
    while time.monotonic() < deadline and proc.poll() is None:
        now = _sack(root)
        if now is not None and now != before:
            return
        time.sleep(0.01)
    _log(f"{root}/run/slurm/sack.socket not bound anew after {SACK_WAIT_S:.0f} s; starting the next daemon")


def _write_json(path: str, payload: object) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(payload, handle)
    os.replace(tmp, path)


def _shutdown(daemons: dict[str, subprocess.Popen[bytes]], timeout: float) -> None:
    for name, proc in reversed(list(daemons.items())):
        if proc.poll() is None:
            _log(f"SIGTERM {name} (pid {proc.pid})")
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for name, proc in daemons.items():
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _log(f"SIGKILL {name} (pid {proc.pid}): still running after {timeout:.0f} s")
            proc.kill()
            proc.wait()


def main(config_path: str) -> int:
    with open(config_path) as handle:
        config = json.load(handle)

    def on_term(_signum: int, _frame: object) -> None:
        raise _Stop

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    daemons: dict[str, subprocess.Popen[bytes]] = {}
    exited: dict[str, int] = {}
    try:
        created = _mount_all(config)
        _write_json(config["mountpoints"], created)
        for daemon in config["daemons"]:
            before = _sack(config["chroot"])
            daemons[daemon["name"]] = _spawn(config, daemon)
            _log(f"started {daemon['name']} (namespace pid {daemons[daemon['name']].pid})")
            if daemon["name"].startswith("slurmd-"):
                _await_sack(config["chroot"], daemons[daemon["name"]], before)
        _write_json(config["report"], {name: proc.pid for name, proc in daemons.items()})
        by_pid = {proc.pid: name for name, proc in daemons.items()}
        while True:
            pid, status = os.waitpid(-1, 0)  # also reaps orphaned job processes
            if pid in by_pid:
                name = by_pid.pop(pid)
                daemons[name].returncode = os.waitstatus_to_exitcode(status)
                exited[name] = daemons[name].returncode or 0
                _log(f"{name} exited with {exited[name]}")
                _write_json(config["exited"], exited)
    except _Stop:
        _log("stopping")
        _shutdown(daemons, float(config.get("stop_timeout", 10)))
        return 0
    except ChildProcessError:
        _log("every child exited")
        return 1
    except Exception as exc:
        _log(f"failed: {exc!r}")
        _shutdown(daemons, 2)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
