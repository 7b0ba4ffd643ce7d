"""What every benchmark shares: the result row, machine facts, percentiles, processes started by PID,
the peers' virtualenv and network namespaces (peers only ever see loopback).
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import platform
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

REPO = pathlib.Path(__file__).resolve().parents[1]
WORK = pathlib.Path(os.environ.get("STARFORGE_BENCH_WORK") or REPO / "build" / "bench").resolve()
PEERS_VENV = REPO / "build" / "bench-peers"
PEERS_PYTHON = PEERS_VENV / "bin" / "python"
# The peers' own packages: kept out of the project's .venv because mlflow pins pyarrow<26 and (through
# graphene) python-dateutil<3, which contradict requirements.lock (kubernetes needs python-dateutil>=3).
PEER_PACKAGES = ("ray[default]==2.60.0", "mlflow==3.17.2")
PEERS_DIR = pathlib.Path(__file__).resolve().parent / "peers"
T = TypeVar("T")
QUICK = os.environ.get("STARFORGE_BENCH_QUICK") == "1"
# Quick mode (trying the harness) skips the peers that are costly to start (a Ray head, an MLflow
# server, the Slurm cluster; the first run also builds their virtualenv) unless this is set too.
PEERS_IN_QUICK = os.environ.get("STARFORGE_BENCH_PEERS") == "1"
PEER_NOT_RUN = "peer not run in quick mode"
NO_PEER = "no peer"


def skip_peer(row: str) -> bool:
    """True (and says so) when `row`'s costly peer is left out: quick mode without STARFORGE_BENCH_PEERS=1."""
    if QUICK and not PEERS_IN_QUICK:
        log(f"{row}: {PEER_NOT_RUN} (STARFORGE_BENCH_PEERS=1 runs it)")
        return True
    return False


def env_float(var: str, default: float, *, minimum: float = 0.0) -> float:
    """Environment variable `var` as a number of at least `minimum` (`default` when unset); a bad
    value stops the run with one line naming the variable, before anything starts."""
    text = os.environ.get(var, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value >= minimum:  # also false for nan
        raise SystemExit(f"{var}={text}: expected a number of at least {minimum:g}")
    return value


def env_int(var: str, default: int, *, minimum: int = 0) -> int:
    """As `env_float`, for a whole number."""
    text = os.environ.get(var, "").strip()
    if not text:
        return default
    if not text.isdigit() or int(text) < minimum:
        raise SystemExit(f"{var}={text}: expected a whole number of at least {minimum}")
    return int(text)


_CPU_RANGE = re.compile(r"(\d+)(?:-(\d+))?")


def _parse_cpus(text: str) -> set[int]:
    """The CPUs of a list as taskset takes it ("0", "0,1", "0-3,6"); ValueError for anything else."""
    cpus: set[int] = set()
    for part in text.split(","):
        m = _CPU_RANGE.fullmatch(part.strip())
        if m is None or int(m[2] or m[1]) < int(m[1]):
            raise ValueError(f"not a CPU or a range of CPUs: {part.strip()!r}")
        cpus.update(range(int(m[1]), int(m[2] or m[1]) + 1))
    return cpus


def online_cpus() -> set[int]:
    """The machine's online CPUs (/sys/devices/system/cpu/online), else those this process may use."""
    try:
        return _parse_cpus(pathlib.Path("/sys/devices/system/cpu/online").read_text().strip())
    except (OSError, ValueError):
        return os.sched_getaffinity(0)


def cpu_list(var: str) -> list[int] | None:
    """The CPUs named by environment variable `var` ("0", "0,1", "0-3,6"), or None when it is unset.
    Exits with one message unless they are all among the machine's online CPUs (not this
    process's affinity: a floor server pinned to the console's CPUs imports this module too, and
    the load generator's CPUs are not among its own), or when the list is not one taskset takes."""
    text = os.environ.get(var, "").strip()
    if not text:
        return None
    try:
        cpus = _parse_cpus(text)
    except ValueError as e:
        raise SystemExit(f"{var}={text}: {e}; expected a list as taskset takes it: 0, 0,1 or 0-3,6") from None
    allowed = online_cpus()
    if not cpus <= allowed:
        raise SystemExit(f"{var}={text}: CPUs {sorted(cpus)} are not all among this machine's {sorted(allowed)}")
    return sorted(cpus)


# Where the rows run (see docs/benchmarks.md, "Pinning to N cores"): the console a row starts (`sf
# up`: control plane and executor; a floor's bare server) on these CPUs only, and separately the load
# generators. Unset: wherever the kernel puts them.
CONSOLE_CPUS = cpu_list("STARFORGE_BENCH_CONSOLE_CPUS")
LOADGEN_CPUS = cpu_list("STARFORGE_BENCH_LOADGEN_CPUS")


def pinning() -> dict[str, list[int] | None]:
    """The CPU pinning of this run, as recorded in results.json and each row's details."""
    return {"console_cpus": CONSOLE_CPUS, "loadgen_cpus": LOADGEN_CPUS}


def pinned_command(cmd: Sequence[str], cpus: list[int] | None) -> list[str]:
    """`cmd` run on `cpus` only (through taskset, which sets the affinity and execs it: the PID is
    the command's own, and every thread and child it starts inherits the affinity)."""
    if not cpus:
        return list(cmd)
    return ["taskset", "--cpu-list", ",".join(map(str, cpus)), *cmd]


def pin_this_process(cpus: list[int] | None) -> None:
    """Every thread of this process (and so what it starts from now on) on `cpus` only."""
    if not cpus:
        return
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError):  # a thread that just ended
            os.sched_setaffinity(int(tid), cpus)


@contextlib.contextmanager
def pinned(cpus: list[int] | None) -> Iterator[None]:
    """This process on `cpus` for the block (a load generator running in the bench's own process),
    then back on the CPUs it had."""
    if not cpus:
        yield
        return
    before = sorted(os.sched_getaffinity(0))
    pin_this_process(cpus)
    try:
        yield
    finally:
        pin_this_process(before)


@dataclass
class Result:
    """One row of the table."""

    name: str
    metric: str  # what `figure` measures, with its unit
    figure: float
    unit: str
    peer: str  # what the peer is
    peer_figure: float | None
    ratio: float | None  # always "how many times better we are" (>1: better), see ratio_note
    ratio_note: str
    target: str
    met: bool | None
    command: str
    limit: str = ""  # what limits the figure now
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def ratio_higher_better(ours: float, peer: float | None) -> float | None:
    return None if not peer else ours / peer


def ratio_lower_better(ours: float, peer: float | None) -> float | None:
    return None if not peer or not ours else peer / ours


def pct(values: Sequence[float], p: float) -> float:
    """The p-th percentile (nearest rank, p in 0..100) of `values`."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
    return ordered[k]


def median_item(items: Sequence[T], key: Callable[[T], float]) -> T:
    """The item whose `key` is the median of `items` (the lower middle one of an even count): a
    whole run, where `pct` gives only a figure."""
    return sorted(items, key=key)[(len(items) - 1) // 2]


def summary(values: Sequence[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": pct(values, 50),
        "p90": pct(values, 90),
        "p99": pct(values, 99),
        "max": max(values) if values else float("nan"),
        "mean": statistics.fmean(values) if values else float("nan"),
    }


def loadavg() -> tuple[float, float, float]:
    one, five, fifteen = os.getloadavg()
    return round(one, 2), round(five, 2), round(fifteen, 2)


def machine_cpu() -> tuple[float, float]:
    """(busy, all) CPU seconds the whole machine has spent since boot, over every core, from
    /proc/stat (idle and iowait are not busy). Two readings give how many cores were busy between
    them, whoever's processes they were: a peer's daemons included."""
    fields = [int(x) for x in pathlib.Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
    tick = os.sysconf("SC_CLK_TCK")
    total = sum(fields)
    return (total - fields[3] - fields[4]) / tick, total / tick


def cores_busy(before: tuple[float, float], after: tuple[float, float], wall: float) -> float:
    """How many cores were busy on average between two `machine_cpu` readings `wall` seconds apart."""
    return (after[0] - before[0]) / wall if wall > 0 else 0.0


def busy_fraction(seconds: float = 1.0) -> float:
    """The share of the machine's CPU time (all cores) that was not idle over `seconds`: 0.0 is a
    quiet machine, 1.0 every core busy."""
    busy0, all0 = machine_cpu()
    time.sleep(seconds)
    busy1, all1 = machine_cpu()
    return (busy1 - busy0) / (all1 - all0) if all1 > all0 else 0.0


SETTLE_BUSY = env_float("STARFORGE_BENCH_SETTLE_BUSY", 0.15)
SETTLE_MAX_S = env_float("STARFORGE_BENCH_SETTLE_MAX_S", 0.0 if QUICK else 90.0)
SETTLE_SAMPLE_S = 0.2 if QUICK else 1.0


def settle() -> dict[str, float]:
    """Waits until the machine is quiet before a row: two samples in a row (of a second each)
    under SETTLE_BUSY of its CPU busy, at most SETTLE_MAX_S; in quick mode one short sample and no
    wait. A row that follows a heavy one (the 10,000 followers, the throughput storm) otherwise
    starts while the last row's processes are still exiting and the kernel is still writing their
    files back, and measures that instead of itself. Returns how long it waited and how busy the
    machine was when the row began (recorded in the row's details)."""
    t0 = time.monotonic()
    quiet = 0
    while True:
        busy = busy_fraction(SETTLE_SAMPLE_S)
        quiet = quiet + 1 if busy < SETTLE_BUSY else 0
        if quiet >= 2 or time.monotonic() - t0 >= SETTLE_MAX_S:
            return {"settle_s": round(time.monotonic() - t0, 1), "busy_before": round(busy, 3)}


# The project's own packages, as an installed StarForge has them (pip byte-compiles what it
# installs; this checkout's editable install does not, and a shell with PYTHONDONTWRITEBYTECODE=1
# never writes them, so every `sf` and console start would compile its modules again).
SOURCE_TREES = ("cli", "control", "executor_svc", "forgelet", "recipes", "capsule", "common", "gen/python", "gen/pure")


def compile_sources() -> int:
    """Byte-compile the project's packages (py_compile writes whatever PYTHONDONTWRITEBYTECODE
    says); returns how many trees were compiled without error. Up-to-date files are skipped."""
    import compileall

    ok = 0
    for tree in SOURCE_TREES:
        ok += bool(compileall.compile_dir(str(REPO / tree), quiet=2, workers=1))
    return ok


def machine() -> dict[str, Any]:
    cpu = "?"
    with contextlib.suppress(OSError):
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_gib = 0.0
    with contextlib.suppress(OSError, ValueError):
        for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    disk = "?"
    with contextlib.suppress(OSError):
        disk = subprocess.run(
            ["df", "-h", "--output=source,fstype", str(REPO)], capture_output=True, text=True, check=False
        ).stdout.splitlines()[-1]
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "mem_gib": mem_gib,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "disk": " ".join(disk.split()),
        "load": loadavg(),
        **pinning(),
    }


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (all its threads), from /proc/<pid>/stat."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child_pids(pid: int) -> list[int]:
    """The running children of process `pid`, of every thread of it: /proc lists a child under
    the thread that forked it only (the executor starts its zygote from a worker thread). Empty
    when `pid` is gone."""
    kids: list[int] = []
    with contextlib.suppress(OSError):
        for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                kids += [int(k) for k in (task / "children").read_text().split()]
    return kids


def cpu_seconds_of(pids: Sequence[int]) -> float:
    """User + system CPU seconds of the processes `pids` so far; one that has exited counts 0."""
    total = 0.0
    for pid in pids:
        try:
            total += cpu_seconds(pid)
        except OSError:
            continue
    return total


def rss_mib(pid: int) -> dict[str, float]:
    """Current and peak resident memory of `pid` (MiB)."""
    out = {"rss": 0.0, "hwm": 0.0}
    with contextlib.suppress(OSError):
        for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                out["rss"] = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                out["hwm"] = int(line.split()[1]) / 1024
    return out


def fresh_dir(name: str) -> pathlib.Path:
    path = WORK / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def stop_pid(proc: subprocess.Popen[Any], grace: float = 15.0) -> None:
    """SIGTERM the process group we started (by its PID), SIGKILL after `grace`."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def log(text: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def floor_server(module: str, *args: str, what: str) -> Iterator[tuple[int, str]]:
    """`python -m <module> --serve READY_FILE *args` in its own process, pinned as the console is,
    until it writes its port: (pid, address); stopped by its PID after. The floors' bare servers."""
    ready = fresh_dir(module.rsplit(".", 1)[-1].replace("_", "-")) / "port"
    serve = [sys.executable, "-m", module, "--serve", str(ready), *args]
    proc = subprocess.Popen(pinned_command(serve, CONSOLE_CPUS), cwd=REPO, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() or not ready.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start")
            time.sleep(0.05)
        yield proc.pid, f"127.0.0.1:{ready.read_text()}"
    finally:
        stop_pid(proc)


# -- peers -----------------------------------------------------------------------------------------


def ensure_peers() -> pathlib.Path:
    """The peers' virtualenv (Ray, MLflow), created on first use.

    It counts as made only once pip succeeded (a stamp file): a run interrupted while installing
    leaves a virtualenv whose python exists but whose packages do not, and the next run starts over."""
    stamp = PEERS_VENV / ".installed"
    if not stamp.exists():
        log(f"creating {PEERS_VENV} with {', '.join(PEER_PACKAGES)} (first run only)")
        base = shutil.which("python3") or sys.executable
        subprocess.run([base, "-m", "venv", "--clear", str(PEERS_VENV)], check=True)
        subprocess.run([str(PEERS_PYTHON), "-m", "pip", "install", "--quiet", *PEER_PACKAGES], check=True)
        stamp.write_text(" ".join(PEER_PACKAGES) + "\n")
    return PEERS_PYTHON


@contextlib.contextmanager
def netns() -> Iterator[str]:
    """A network namespace with only an `lo` that is up: a peer started inside can reach nothing
    but itself, whatever address it would like to bind or dial."""
    name = f"sfbench-{secrets.token_hex(3)}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


# SIGTERM to a peer driver stops what it started (a Ray head: up to 20 s), then SIGKILL
PEER_STOP_GRACE = 30.0


def run_peer(script: str, args: Sequence[str], *, timeout: float, in_netns: bool = True) -> dict[str, Any]:
    """Run bench/peers/<script> with the peers' Python (inside a fresh netns); its last stdout line is JSON."""
    python = ensure_peers()
    cmd = [str(python), str(PEERS_DIR / script), *args]
    with contextlib.ExitStack() as stack:
        if in_netns:
            ns = stack.enter_context(netns())
            cmd = ["ip", "netns", "exec", ns, *cmd]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
        env.update(RAY_USAGE_STATS_ENABLED="0", MLFLOW_ENABLE_TELEMETRY="false", DO_NOT_TRACK="1")
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=None, text=True, cwd=str(WORK), env=env, start_new_session=True
        )
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_pid(proc, PEER_STOP_GRACE)
            raise RuntimeError(f"peer {script} did not finish within {timeout:.0f} s") from None
        except BaseException:  # Ctrl-C of the bench: the peer is in its own session, not told
            stop_pid(proc, PEER_STOP_GRACE)
            raise
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"peer {script} failed (exit {proc.returncode}): {out[-2000:]}")
    doc: dict[str, Any] = json.loads(lines[-1])
    return doc
