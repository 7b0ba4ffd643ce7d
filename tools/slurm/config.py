"""Layout of a cluster's run directory and the slurm.conf / gres.conf written into it.

Everything a cluster writes lives under one run directory, which is bind-mounted into the chroot at
the *same absolute path*. So every path in slurm.conf means the same file on the host and inside
the chroot, and a job can read what the host staged (see README.md, "Staging directory").
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass

PARTITION = "main"
NODES = ("n1", "n2")
GPU_TYPE = "h100"
GPUS_PER_NODE = 4
CPUS_PER_NODE = 8
MEMORY_MB_PER_NODE = 8000
# Seconds between the SIGTERM and the SIGKILL of a cancelled job (Slurm's default is 30).
KILL_WAIT_SECONDS = 5


@dataclass(frozen=True)
class Layout:
    """The paths of one cluster, all under `run_dir`."""

    run_dir: pathlib.Path

    @property
    def etc(self) -> pathlib.Path:
        """slurm.conf, gres.conf and keys; bind-mounted over the chroot's /etc/slurm."""
        return self.run_dir / "etc"

    @property
    def state(self) -> pathlib.Path:
        return self.run_dir / "state"

    @property
    def spool(self) -> pathlib.Path:
        return self.run_dir / "spool"

    @property
    def log(self) -> pathlib.Path:
        return self.run_dir / "log"

    @property
    def run(self) -> pathlib.Path:
        """pid files, the namespace init's config and its reports."""
        return self.run_dir / "run"

    @property
    def dev(self) -> pathlib.Path:
        """Fake GPU device nodes (gres.conf `File=` must name character devices)."""
        return self.run_dir / "dev"

    @property
    def staging(self) -> pathlib.Path:
        """World-writable (1777); the same path on the host and inside jobs."""
        return self.run_dir / "staging"

    @property
    def slurm_key(self) -> pathlib.Path:
        return self.etc / "slurm.key"

    @property
    def jwt_key(self) -> pathlib.Path:
        return self.etc / "jwt_hs256.key"

    @property
    def info_file(self) -> pathlib.Path:
        """cluster.json: what `start` returned, for `status` and for reuse by test sessions."""
        return self.run_dir / "cluster.json"

    @property
    def pids_file(self) -> pathlib.Path:
        """Every process started, written before anything waits, so `stop` works after a failed start."""
        return self.run / "pids.json"

    def gpu_devices(self, node_index: int) -> list[pathlib.Path]:
        first = node_index * GPUS_PER_NODE
        return [self.dev / f"gpu{first + i}" for i in range(GPUS_PER_NODE)]

    def daemon_log(self, name: str) -> pathlib.Path:
        return self.log / f"{name}.log"


@dataclass(frozen=True)
class Ports:
    """TCP ports on 127.0.0.1, chosen free at start."""

    slurmctld: int
    slurmd: tuple[int, ...]
    slurmrestd: int


def slurm_conf(layout: Layout, ports: Ports, controller_host: str) -> str:
    """slurm.conf for a one-host cluster of two nodes that each claim 8 CPUs and 4 GPUs.

    Beyond the settings docs/ARCHITECTURE.md lists for Slurm, these were needed:
    - `SlurmdParameters=config_overrides`: the nodes claim more CPUs than the host has; without it
      slurmd registers the real count and slurmctld drains the node ("Low socket*core*thread count").
    - `SelectTypeParameters=CR_Core`: memory is not a consumable resource, otherwise the default
      "all of the node's memory" per job would let only one job run per node.
    - `KillWait`: a short SIGTERM-to-SIGKILL window keeps cancel tests and `stop` fast.
    """
    r = layout
    lines = [
        "# Written by tools/slurm/cluster.py; regenerated on every start.",
        "ClusterName=starforge",
        f"SlurmctldHost={controller_host}(127.0.0.1)",
        f"SlurmctldPort={ports.slurmctld}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/slurm",
        "CredType=cred/slurm",
        "AuthAltTypes=auth/jwt",
        f"AuthAltParameters=jwt_key={r.jwt_key}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "GresTypes=gpu",
        "SchedulerParameters=bf_interval=1",
        "SlurmdParameters=config_overrides",
        "MpiDefault=none",
        "ReturnToService=2",
        f"KillWait={KILL_WAIT_SECONDS}",
        f"StateSaveLocation={r.state}",
        f"SlurmdSpoolDir={r.spool}/slurmd-%n",
        f"SlurmctldPidFile={r.run}/slurmctld.pid",
        f"SlurmdPidFile={r.run}/slurmd-%n.pid",
        f"SlurmctldLogFile={r.daemon_log('slurmctld')}",
        f"SlurmdLogFile={r.log}/slurmd-%n.log",
    ]
    for name, port in zip(NODES, ports.slurmd, strict=True):
        lines.append(
            f"NodeName={name} NodeAddr=127.0.0.1 Port={port} CPUs={CPUS_PER_NODE} "
            f"RealMemory={MEMORY_MB_PER_NODE} Gres=gpu:{GPU_TYPE}:{GPUS_PER_NODE} State=UNKNOWN"
        )
    lines.append(f"PartitionName={PARTITION} Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def gres_conf(layout: Layout) -> str:
    """gres.conf: each node gets its own fake GPU device nodes (type h100)."""
    lines = ["# Written by tools/slurm/cluster.py; the File= entries are character devices (c 1 3)."]
    for index, name in enumerate(NODES):
        devices = layout.gpu_devices(index)
        first = devices[0].name.removeprefix("gpu")
        last = devices[-1].name.removeprefix("gpu")
        lines.append(f"NodeName={name} Name=gpu Type={GPU_TYPE} File={layout.dev}/gpu[{first}-{last}]")
    return "\n".join(lines) + "\n"
