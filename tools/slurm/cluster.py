"""Start, stop and inspect a one-host, two-node Slurm 24.11 test cluster.

    python -m tools.slurm.cluster start  RUN_DIR   # prints the cluster's JSON info
    python -m tools.slurm.cluster status RUN_DIR
    python -m tools.slurm.cluster token  RUN_DIR [--user U] [--lifespan S]
    python -m tools.slurm.cluster stop   RUN_DIR

`start` builds the chroot if needed (`chroot.py`), writes slurm.conf into RUN_DIR, starts
`unshare --pid --mount ... nsinit.py` (which mounts and starts slurmctld, slurmd -N n1/n2 and
slurmrestd), records every PID with its start time, and returns once slurmctld mints tokens, both
nodes are IDLE and slurmrestd answers. On any failure it stops what it started and raises
`ClusterError` quoting the daemons' logs. `stop` kills only recorded processes, then proves that
no process is left in the cluster's PID namespace. Needs root (namespaces, mknod, chroot).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from tools.slurm import chroot as chroot_mod
from tools.slurm import config, probes, procs, rundir
from tools.slurm.errors import ClusterError

NSINIT = pathlib.Path(__file__).with_name("nsinit.py")
DEFAULT_TOKEN_LIFESPAN_S = 24 * 3600
_LAUNCHED: dict[str, subprocess.Popen[bytes]] = {}  # run_dir -> unshare child, reaped by stop()


@dataclass(frozen=True)
class ClusterInfo:
    """What a started cluster offers its clients (also written to RUN_DIR/cluster.json)."""

    run_dir: str
    chroot: str
    slurm_version: str
    restd_url: str
    user: str
    uid: int
    gid: int
    token: str
    token_expires_at: float
    staging_dir: str
    partition: str
    nodes: list[str]
    gpu_type: str
    gpus_per_node: int
    ports: dict[str, int]
    pids: dict[str, int]
    logs: dict[str, str]
    start_seconds: float
    chroot_build_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ClusterInfo:
        return cls(**json.loads(text))


def _await(what: str, deadline: float, check: Callable[[], Any], alive: Callable[[], None]) -> Any:
    """Poll `check` until it returns without NotReady; `alive` raises if a daemon died meanwhile."""
    last = "no answer yet"
    while time.monotonic() < deadline:
        alive()
        try:
            return check()
        except probes.NotReady as exc:
            last = str(exc)
        time.sleep(0.2)
    raise ClusterError(f"timed out waiting for {what}; last seen: {last}")


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it when the process that started it dies (PR_SET_PDEATHSIG).

    unshare's --kill-child passes that on to nsinit, whose death ends the whole cluster: a test
    session killed with SIGKILL leaves no cluster behind.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(1, signal.SIGKILL, 0, 0, 0) != 0:  # 1 = PR_SET_PDEATHSIG
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


def _launch(
    layout: config.Layout, nsinit_config: pathlib.Path, deadline: float, *, die_with_caller: bool
) -> list[procs.Proc]:
    """Start unshare + nsinit and record every PID; returns [unshare, nsinit, daemons...]."""
    with open(layout.log / "nsinit.log", "ab") as out:
        child = subprocess.Popen(
            [
                *("unshare", "--pid", "--fork", "--mount", "--propagation", "private", "--kill-child"),
                *(sys.executable, "-I", str(NSINIT), str(nsinit_config)),
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # not hit by the caller's Ctrl-C; stop() ends it
            preexec_fn=_die_with_parent if die_with_caller else None,  # noqa: PLW1509 - only prctl
        )
    _LAUNCHED[str(layout.run_dir)] = child
    started = [procs.Proc.of("unshare", child.pid)]
    rundir.save_procs(layout, started)

    def unshare_alive() -> None:
        if child.poll() is not None:
            raise ClusterError(f"unshare/nsinit exited with {child.returncode}")

    init_pid = _await(
        "the namespace init",
        deadline,
        lambda: (procs.children_of(child.pid) or _raise(probes.NotReady("no child yet")))[0],
        unshare_alive,
    )
    started.append(procs.Proc.of("nsinit", init_pid))
    namespace = procs.pid_namespace(init_pid)
    rundir.save_procs(layout, started, namespace=namespace)
    report = layout.run / "daemons.json"
    _await(
        "nsinit to start the daemons", deadline, lambda: report.is_file() or _raise(probes.NotReady("")), unshare_alive
    )
    by_ns_pid = {ns_pid: name for name, ns_pid in json.loads(report.read_text()).items()}
    for pid in procs.children_of(init_pid):
        name = by_ns_pid.get(procs.namespace_pid(pid) or -1)
        if name:
            started.append(procs.Proc.of(name, pid))
    rundir.save_procs(layout, started, namespace=namespace)
    return started


def _raise(exc: Exception) -> Any:
    raise exc


def _check_running(layout: config.Layout) -> None:
    recorded, _ = rundir.load_procs(layout)
    if live := [proc for proc in recorded if proc.alive()]:
        raise ClusterError(
            f"a cluster already runs in {layout.run_dir} (pids {[p.pid for p in live]}); "
            f"stop it first: python -m tools.slurm.cluster stop {layout.run_dir}"
        )
    if layout.pids_file.exists():
        stop(layout.run_dir)  # a crashed run: only its mount-point directories are left


def start(
    run_dir: str | os.PathLike[str],
    *,
    chroot_dir: pathlib.Path | None = None,
    timeout: float = 90.0,
    token_lifespan_s: int = DEFAULT_TOKEN_LIFESPAN_S,
    die_with_caller: bool = False,
    log: Callable[[str], None] = lambda _msg: None,
) -> ClusterInfo:
    """Start a cluster in `run_dir` and return once it runs jobs; raise ClusterError otherwise.

    With `die_with_caller` the cluster is killed when the calling thread's process dies (test
    sessions); without it the cluster outlives its caller (the CLI) until `stop`.
    """
    began = time.monotonic()
    if os.geteuid() != 0:
        raise ClusterError("the Slurm test cluster needs root (namespaces, mount, mknod, chroot)")
    layout = config.Layout(pathlib.Path(run_dir).resolve())
    if any(ch.isspace() for ch in str(layout.run_dir)):
        raise ClusterError(f"the run directory must not contain whitespace (slurm.conf): {layout.run_dir}")
    root = chroot_mod.ensure_chroot(chroot_dir, log=log)
    if layout.run_dir == root.path or root.path in layout.run_dir.parents:
        raise ClusterError(f"the run directory {layout.run_dir} must lie outside the chroot {root.path}")
    _check_running(layout)
    free = rundir.free_ports(2 + len(config.NODES))
    ports = config.Ports(slurmctld=free[0], slurmd=tuple(free[1:-1]), slurmrestd=free[-1])
    try:
        rundir.prepare(layout, ports)
        nsinit_config = rundir.write_nsinit_config(layout, root.path, ports)
    except OSError as exc:
        raise ClusterError(f"cannot prepare the run directory {layout.run_dir}: {exc}") from exc
    deadline = time.monotonic() + timeout
    try:
        started = _launch(layout, nsinit_config, deadline, die_with_caller=die_with_caller)
        init_pid = started[1].pid

        def daemons_alive() -> None:
            if dead := [proc.name for proc in started if not proc.alive()]:
                raise ClusterError(f"{', '.join(dead)} exited during start-up")

        expected = {"slurmctld", "slurmrestd", *(f"slurmd-{node}" for node in config.NODES)}
        if missing := expected - {proc.name for proc in started}:
            raise ClusterError(f"{', '.join(sorted(missing))} did not start")
        log("daemons started; waiting for slurmctld")
        token = _await(
            "slurmctld to mint a token (scontrol token)",
            deadline,
            lambda: probes.mint_token(init_pid, root.path, chroot_mod.JOB_USER, token_lifespan_s),
            daemons_alive,
        )
        restd_url = f"http://127.0.0.1:{ports.slurmrestd}"
        log("waiting for both nodes to be IDLE (through slurmrestd)")
        _await(
            "nodes n1 and n2 to be IDLE through slurmrestd",
            deadline,
            lambda: probes.nodes_idle(restd_url, chroot_mod.JOB_USER, token, config.NODES),
            daemons_alive,
        )
    except (ClusterError, OSError, subprocess.SubprocessError) as exc:
        details = rundir.diagnostics(layout.run_dir)
        with contextlib.suppress(ClusterError):
            stop(layout.run_dir)
        raise ClusterError(f"the Slurm test cluster in {layout.run_dir} did not start: {exc}\n{details}") from exc
    info = ClusterInfo(
        run_dir=str(layout.run_dir),
        chroot=str(root.path),
        slurm_version=root.slurm_version,
        restd_url=restd_url,
        user=chroot_mod.JOB_USER,
        uid=chroot_mod.JOB_UID,
        gid=chroot_mod.JOB_GID,
        token=token,
        token_expires_at=time.time() + token_lifespan_s,
        staging_dir=str(layout.staging),
        partition=config.PARTITION,
        nodes=list(config.NODES),
        gpu_type=config.GPU_TYPE,
        gpus_per_node=config.GPUS_PER_NODE,
        ports={"slurmctld": ports.slurmctld, "slurmrestd": ports.slurmrestd}
        | {f"slurmd-{node}": port for node, port in zip(config.NODES, ports.slurmd, strict=True)},
        pids={proc.name: proc.pid for proc in started},
        logs=rundir.log_paths(layout),
        start_seconds=round(time.monotonic() - began, 2),
        chroot_build_seconds=round(root.build_seconds, 1),
    )
    fd = os.open(layout.info_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # holds the token
    with os.fdopen(fd, "w") as handle:
        handle.write(info.to_json() + "\n")
    return info


def stop(run_dir: str | os.PathLike[str], *, timeout: float = 20.0) -> list[str]:
    """Stop the cluster in `run_dir`; return the names of the processes that had to be killed.

    Signals only recorded processes: SIGTERM to the namespace init (which stops the daemons in
    order), SIGKILL to it after `timeout` (the kernel then kills the rest of its namespace). Raises
    ClusterError if any process is left in the namespace. Stopping a stopped cluster is a no-op.
    """
    layout = config.Layout(pathlib.Path(run_dir).resolve())
    recorded, record = rundir.load_procs(layout)
    by_name = {proc.name: proc for proc in recorded}
    init = by_name.get("nsinit") or _init_of(by_name.get("unshare"))
    namespace = record.get("namespace") or (procs.pid_namespace(init.pid) if init else None)
    if init is not None and init not in recorded:
        recorded.append(init)
    killed: list[str] = []
    if init is not None:
        # Before the daemons run there is nothing to stop gently (and an init that has not yet
        # installed its SIGTERM handler would ignore SIGTERM: PID 1 of a namespace does that).
        graceful = (layout.run / "daemons.json").is_file()
        gentle_failed = not graceful or (init.signal(signal.SIGTERM) and procs.wait_gone([init], timeout))
        if gentle_failed and init.signal(signal.SIGKILL):
            killed.append("nsinit")
    for proc in recorded:  # all die with the namespace's init; this only catches the unexpected
        if proc.alive() and procs.wait_gone([proc], 5.0 if init else 0.0) and proc.signal(signal.SIGKILL):
            killed.append(proc.name)
    if child := _LAUNCHED.pop(str(layout.run_dir), None):
        child.wait(10)
    if left := procs.wait_gone(recorded, 5.0):
        raise ClusterError(f"processes of {layout.run_dir} survived SIGKILL: {left}")
    if namespace and (members := _wait_namespace_empty(namespace, 5.0)):
        raise ClusterError(f"processes are left in the cluster's PID namespace {namespace}: {members}")
    mountpoints = layout.run / "mountpoints.json"
    if mountpoints.is_file():
        root = json.loads((layout.run / "nsinit.json").read_text())["chroot"]
        for directory in reversed(json.loads(mountpoints.read_text())):
            if directory.startswith(root + "/"):
                with contextlib.suppress(OSError):
                    os.rmdir(directory)  # only if empty: never removes anything a job wrote
    layout.pids_file.unlink(missing_ok=True)
    layout.info_file.unlink(missing_ok=True)
    return killed


def _wait_namespace_empty(namespace: str, timeout: float) -> list[int]:
    """Processes still in `namespace` after `timeout` (the kernel reaps them after their init)."""
    deadline = time.monotonic() + timeout
    while (members := procs.members_of(namespace)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return members


def _init_of(unshare: procs.Proc | None) -> procs.Proc | None:
    """The namespace init forked by `unshare`, for a start that failed before recording it."""
    if unshare is None or not unshare.alive():
        return None
    for pid in procs.children_of(unshare.pid):
        with contextlib.suppress(ProcessLookupError):
            return procs.Proc.of("nsinit", pid)
    return None


def status(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Whether the cluster runs, each recorded process's liveness, and its info when running."""
    layout = config.Layout(pathlib.Path(run_dir).resolve())
    recorded, _ = rundir.load_procs(layout)
    alive = {proc.name: proc.alive() for proc in recorded}
    running = bool(alive) and all(alive.values())
    result: dict[str, Any] = {"run_dir": str(layout.run_dir), "running": running, "processes": alive}
    if layout.info_file.is_file():
        result["info"] = json.loads(layout.info_file.read_text())
    return result


def load_info(run_dir: str | os.PathLike[str]) -> ClusterInfo:
    """The info of a running cluster; ClusterError when none runs in `run_dir`."""
    current = status(run_dir)
    if not current["running"] or "info" not in current:
        raise ClusterError(f"no running Slurm test cluster in {run_dir}: {current['processes'] or 'never started'}")
    return ClusterInfo(**current["info"])


def token(run_dir: str | os.PathLike[str], user: str, lifespan_s: int = DEFAULT_TOKEN_LIFESPAN_S) -> str:
    """Mint a JWT for `user` on the running cluster (e.g. another user, or a fresh one)."""
    info = load_info(run_dir)
    try:
        return probes.mint_token(info.pids["nsinit"], pathlib.Path(info.chroot), user, lifespan_s)
    except probes.NotReady as exc:
        raise ClusterError(f"cannot mint a token for {user}: {exc}") from exc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.slurm.cluster", description="Slurm test cluster")
    parser.add_argument("command", choices=["start", "stop", "status", "token"])
    parser.add_argument("run_dir", type=pathlib.Path)
    parser.add_argument("--chroot", type=pathlib.Path, default=None, help="default: build/slurm-chroot")
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for readiness")
    parser.add_argument("--user", default=chroot_mod.JOB_USER, help="token: the user to mint it for")
    parser.add_argument("--lifespan", type=int, default=DEFAULT_TOKEN_LIFESPAN_S, help="token lifespan (s)")
    args = parser.parse_args(argv)

    def progress(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    try:
        if args.command == "start":
            print(start(args.run_dir, chroot_dir=args.chroot, timeout=args.timeout, log=progress).to_json())
        elif args.command == "stop":
            killed = stop(args.run_dir)
            print(json.dumps({"stopped": str(args.run_dir.resolve()), "killed": killed}))
        elif args.command == "status":
            print(json.dumps(status(args.run_dir), indent=2, sort_keys=True))
            return 0 if status(args.run_dir)["running"] else 3
        else:
            print(token(args.run_dir, args.user, args.lifespan))
    except ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
