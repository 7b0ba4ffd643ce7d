"""Which GPUs this node has, and where that came from: NVML, nvidia-smi, or the configuration.

`discovery: auto` tries NVML (the `pynvml` module, when importable and a driver answers), then
`nvidia-smi --query-gpu=...` on PATH, then the configured inventory; the source that answered is
reported to the registry (`Node.inventory_source`), so a node that fell back to its configuration
says so. `discovery: nvml|nvidia-smi` insists on that source (an error when it fails) and
`discovery: config` never probes hardware (tests, CPU machines, nodes with fake GPUs).

Discovered GPUs are real devices (`real_gpus: true`: containers get them through Docker's device
requests); their series comes from the product name ("NVIDIA H200" -> "h200").
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import re
import shutil
import subprocess
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from common.config import ConfigError
from executor_svc.local.config import SeriesConfig

log = logging.getLogger("starforge.forgelet.gpus")

NVIDIA_SMI_QUERY = ["--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"]
# Product-name patterns -> series of the hardware registry (control/config.py DEFAULT_PROFILES).
KNOWN_SERIES = (
    (re.compile(r"\bH200\b", re.I), "h200"),
    (re.compile(r"\bH100\b", re.I), "h100"),
    (re.compile(r"\bA100\b", re.I), "a100"),
    (re.compile(r"\bL40S\b", re.I), "l40s"),
)
CPU_SERIES = "cpu"


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as the registry sees it."""

    index: int
    uuid: str
    name: str
    memory_mib: int
    series: str


@dataclass(frozen=True)
class Inventory:
    """The node's GPUs, where they came from, and the series the local executor allocates from."""

    source: str  # "nvml", "nvidia-smi" or "config"
    gpus: tuple[GpuInfo, ...]
    series: tuple[SeriesConfig, ...]


class DiscoveryError(Exception):
    """A hardware source could not be read (the message says why)."""


def series_of(product: str) -> str:
    """The registry series of a GPU product name; unknown products get a slug of their name."""
    for pattern, series in KNOWN_SERIES:
        if pattern.search(product):
            return series
    slug = re.sub(r"[^a-z0-9]+", "-", product.lower().replace("nvidia", "")).strip("-")
    return slug or "gpu"


def parse_nvidia_smi(text: str) -> list[GpuInfo]:
    """GPUs from `nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits`."""
    gpus = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4:
            raise DiscoveryError(f"nvidia-smi line {n} has {len(parts)} fields, expected 4: {line!r}")
        index, uuid, memory = parts[0], parts[1], parts[-1]
        name = ", ".join(parts[2:-1])  # a product name could hold a comma
        try:
            gpus.append(GpuInfo(int(index), uuid, name, int(float(memory)), series_of(name)))
        except ValueError:
            raise DiscoveryError(f"nvidia-smi line {n} is not index,uuid,name,memory: {line!r}") from None
    return gpus


def from_nvidia_smi(run: Callable[[list[str]], str] | None = None) -> list[GpuInfo]:
    """Ask nvidia-smi (DiscoveryError when it is missing or fails)."""
    if run is None:
        binary = shutil.which("nvidia-smi")
        if binary is None:
            raise DiscoveryError("nvidia-smi is not on PATH")

        def run(args: list[str]) -> str:
            try:
                done = subprocess.run([binary, *args], capture_output=True, text=True, timeout=30, check=False)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise DiscoveryError(f"nvidia-smi did not run: {exc}") from None
            if done.returncode != 0:
                raise DiscoveryError(f"nvidia-smi exited {done.returncode}: {done.stderr.strip()[:300]}")
            return done.stdout

    return parse_nvidia_smi(run(NVIDIA_SMI_QUERY))


def from_nvml() -> list[GpuInfo]:
    """Ask NVML through pynvml (DiscoveryError when it is not installed or no driver answers)."""
    try:
        nvml = importlib.import_module("pynvml")
    except ImportError:
        raise DiscoveryError("pynvml is not installed") from None
    try:
        nvml.nvmlInit()
    except Exception as exc:  # pynvml raises its own NVMLError subclasses
        raise DiscoveryError(f"NVML did not initialise: {exc}") from None
    try:
        gpus = []
        for i in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            name = _text(nvml.nvmlDeviceGetName(handle))
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            memory = int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // (1024 * 1024)
            gpus.append(GpuInfo(i, uuid, name, memory, series_of(name)))
        return gpus
    except Exception as exc:
        raise DiscoveryError(f"NVML query failed: {exc}") from None
    finally:
        with contextlib.suppress(Exception):  # nothing to do about a failed shutdown
            nvml.nvmlShutdown()


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def from_config(node: str, inventory: Sequence[SeriesConfig]) -> list[GpuInfo]:
    """The configured GPUs, named so nobody mistakes them for discovered ones."""
    return [
        GpuInfo(i, f"cfg-{node}-{i}", f"configured {s.series}", 0, s.series)
        for s in inventory
        if s.series != CPU_SERIES
        for i in s.indices()
    ]


def _series(gpus: Sequence[GpuInfo]) -> list[SeriesConfig]:
    by_series: dict[str, list[int]] = defaultdict(list)
    for g in gpus:
        by_series[g.series].append(g.index)
    return [SeriesConfig(series=s, gpus=sorted(idx), real_gpus=True) for s, idx in sorted(by_series.items())]


def discover(
    mode: str,
    node: str,
    configured: Sequence[SeriesConfig],
    cpu_slots: int,
    *,
    nvml: Callable[[], list[GpuInfo]] = from_nvml,
    smi: Callable[[], list[GpuInfo]] = from_nvidia_smi,
) -> Inventory:
    """The node's inventory (module docstring); ConfigError when a required source fails."""
    probes: list[tuple[str, Callable[[], list[GpuInfo]]]] = []
    if mode in ("auto", "nvml"):
        probes.append(("nvml", nvml))
    if mode in ("auto", "nvidia-smi"):
        probes.append(("nvidia-smi", smi))
    for source, probe in probes:
        try:
            found = probe()
        except DiscoveryError as exc:
            if mode != "auto":
                raise ConfigError(f"discovery: {mode}: {exc}") from None
            log.info("GPU discovery: %s unavailable (%s)", source, exc)
            continue
        if found:
            return _with_cpu(Inventory(source, tuple(found), tuple(_series(found))), cpu_slots)
        if mode != "auto":
            raise ConfigError(f"discovery: {mode} found no GPUs")
        log.info("GPU discovery: %s found no GPUs", source)
    series = [s for s in configured if s.series != CPU_SERIES]
    inv = Inventory("config", tuple(from_config(node, series)), tuple(series))
    configured_cpu = next((s for s in configured if s.series == CPU_SERIES), None)
    if configured_cpu is not None:
        return Inventory(inv.source, inv.gpus, (*inv.series, configured_cpu))
    return _with_cpu(inv, cpu_slots)


def _with_cpu(inv: Inventory, cpu_slots: int) -> Inventory:
    """Add the CPU series (jobs without GPUs), bounded by `cpu_slots`."""
    if cpu_slots <= 0:
        return inv
    return Inventory(inv.source, inv.gpus, (*inv.series, SeriesConfig(series=CPU_SERIES, gpus=0, slots=cpu_slots)))
