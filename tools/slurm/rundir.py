"""One cluster's run directory: config, keys, device nodes, the init's config, PIDs and logs.

Everything here is rewritten on each start, except the staging directory's contents (the host
may have staged files there for the next cluster).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import socket
import stat
from dataclasses import asdict
from typing import Any

from tools.slurm import config, probes, procs


def free_ports(count: int) -> list[int]:
    """Distinct free ports on 127.0.0.1 (held open together so they cannot repeat)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def load_procs(layout: config.Layout) -> tuple[list[procs.Proc], dict[str, Any]]:
    if not layout.pids_file.is_file():
        return [], {}
    record = json.loads(layout.pids_file.read_text())
    return [procs.Proc(**entry) for entry in record.get("procs", [])], record


def save_procs(layout: config.Layout, started: list[procs.Proc], **extra: Any) -> None:
    payload = {"procs": [asdict(proc) for proc in started], **extra}
    layout.pids_file.write_text(json.dumps(payload, indent=2))


def log_paths(layout: config.Layout) -> dict[str, str]:
    names = ["nsinit", "slurmctld", "slurmctld.out", "slurmrestd.out"]
    names += [f"slurmd-{node}" for node in config.NODES] + [f"slurmd-{node}.out" for node in config.NODES]
    return {name: str(layout.log / (name if name.endswith(".out") else f"{name}.log")) for name in names}


def diagnostics(run_dir: pathlib.Path, lines: int = 8) -> str:
    """The last lines of every log of the cluster, for error messages."""
    layout = config.Layout(run_dir)
    parts = []
    exited = layout.run / "exited.json"
    if exited.is_file():
        parts.append(f"daemons that exited: {exited.read_text().strip()}")
    for path in map(pathlib.Path, log_paths(layout).values()):
        if path.is_file() and path.stat().st_size:
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {path} (last {len(tail)} lines)\n" + "\n".join(tail))
    return "\n".join(parts) if parts else f"no logs under {layout.log}"


def prepare(layout: config.Layout, ports: config.Ports) -> None:
    """Fresh config, keys, state and device nodes; keeps the staging directory's contents."""
    run_dir = layout.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    run_dir.chmod(0o755)  # slurmrestd (user slurm) reads etc/slurm.conf through it
    for sub in (layout.etc, layout.state, layout.spool, layout.log, layout.run, layout.dev):
        shutil.rmtree(sub, ignore_errors=True)
        sub.mkdir(mode=0o755)
    for node in config.NODES:
        (layout.spool / f"slurmd-{node}").mkdir()
    layout.staging.mkdir(exist_ok=True)
    layout.staging.chmod(0o1777)
    for path, size in ((layout.slurm_key, 1024), (layout.jwt_key, 32)):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(os.urandom(size))
    for index in range(len(config.NODES)):
        for device in layout.gpu_devices(index):
            os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # like /dev/null
    controller = socket.gethostname().split(".")[0]
    names = sorted({"localhost", socket.gethostname(), controller, *config.NODES})
    (layout.run / "hosts").write_text(f"127.0.0.1\t{' '.join(names)}\n::1\tlocalhost ip6-localhost ip6-loopback\n")
    (layout.etc / "slurm.conf").write_text(config.slurm_conf(layout, ports, controller))
    (layout.etc / "gres.conf").write_text(config.gres_conf(layout))


def write_nsinit_config(layout: config.Layout, root: pathlib.Path, ports: config.Ports) -> pathlib.Path:
    env = dict(probes.CLEAN_ENV)
    daemons: list[dict[str, Any]] = [
        {"name": "slurmctld", "argv": ["/usr/sbin/slurmctld", "-D"], "env": env},
    ]
    for node in config.NODES:
        daemons.append({"name": f"slurmd-{node}", "argv": ["/usr/sbin/slurmd", "-D", "-N", node], "env": env})
    daemons.append(
        {
            "name": "slurmrestd",
            # slurmrestd refuses to run as root: the chroot's `slurm` user runs it.
            "userspec": "slurm:slurm",
            "argv": [
                "/usr/sbin/slurmrestd",
                *("-s", "openapi/slurmctld", "-a", "rest_auth/jwt"),
                f"127.0.0.1:{ports.slurmrestd}",
            ],
            "env": env | {"SLURM_JWT": "daemon", "HOME": "/nonexistent"},
        }
    )
    for daemon in daemons:
        daemon["log"] = str(layout.log / f"{daemon['name']}.out")
    payload = {
        "chroot": str(root),
        "run_dir": str(layout.run_dir),
        "etc": str(layout.etc),
        "hosts": str(layout.run / "hosts"),
        "daemons": daemons,
        "report": str(layout.run / "daemons.json"),
        "exited": str(layout.run / "exited.json"),
        "mountpoints": str(layout.run / "mountpoints.json"),
        "stop_timeout": config.KILL_WAIT_SECONDS + 5,
    }
    path = layout.run / "nsinit.json"
    path.write_text(json.dumps(payload, indent=2))
    return path
