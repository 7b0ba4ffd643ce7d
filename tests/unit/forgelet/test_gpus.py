"""GPU discovery: nvidia-smi output parsing (a captured sample) and the configured inventory."""

from __future__ import annotations

import pytest

from common.config import ConfigError
from executor_svc.local.config import SeriesConfig
from forgelet.gpus import DiscoveryError, GpuInfo, discover, parse_nvidia_smi, series_of

# `nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits` on an
# 8 x H200 SXM node.
SAMPLE = """\
0, GPU-5e1b3a7c-0f7e-4f3c-9d0e-3d2b4c1a8e01, NVIDIA H200, 143771
1, GPU-7a9c2d41-6b2e-49f1-8c3a-1e0d5f7b9a12, NVIDIA H200, 143771
2, GPU-0c4e8b13-2d9a-4e65-a7f1-9b3c6d2e4f23, NVIDIA H200, 143771
3, GPU-9f2d6a85-4c1b-4b3e-8e2d-7a5f1c3b6d34, NVIDIA H200, 143771
4, GPU-3b7e1c96-8a4d-4f2a-b6c9-2d8e5a1f7c45, NVIDIA H200, 143771
5, GPU-6d1a9e27-5f3c-4a8b-9c4e-8f2b7d3a1e56, NVIDIA H200, 143771
6, GPU-2e8c4f38-1b6d-4c9e-a3f5-5c7a9e2b8d67, NVIDIA H200, 143771
7, GPU-8a3f7b49-9e2c-4d1f-b8a6-4e1d3c5f9a78, NVIDIA H200, 143771
"""


def test_parse_nvidia_smi_sample() -> None:
    gpus = parse_nvidia_smi(SAMPLE)
    assert [g.index for g in gpus] == list(range(8))
    assert gpus[0] == GpuInfo(0, "GPU-5e1b3a7c-0f7e-4f3c-9d0e-3d2b4c1a8e01", "NVIDIA H200", 143771, "h200")
    assert {g.series for g in gpus} == {"h200"}


def test_parse_nvidia_smi_odd_lines() -> None:
    assert parse_nvidia_smi("\n\n") == []
    # a product name with a comma keeps it; fractional memory is floored
    (gpu,) = parse_nvidia_smi("3, GPU-x, NVIDIA A100-SXM4-80GB, rev 2, 81920.0\n")
    assert (gpu.index, gpu.name, gpu.memory_mib, gpu.series) == (3, "NVIDIA A100-SXM4-80GB, rev 2", 81920, "a100")
    with pytest.raises(DiscoveryError, match="line 1"):
        parse_nvidia_smi("No devices were found\n")
    with pytest.raises(DiscoveryError, match="not index,uuid,name,memory"):
        parse_nvidia_smi("zero, GPU-x, NVIDIA H100, 81559\n")


@pytest.mark.parametrize(
    ("name", "series"),
    [
        ("NVIDIA H200", "h200"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA GeForce RTX 4090", "geforce-rtx-4090"),
    ],
)
def test_series_of(name: str, series: str) -> None:
    assert series_of(name) == series


def _absent() -> list[GpuInfo]:
    raise DiscoveryError("not here")


def test_auto_falls_back_to_the_configured_inventory() -> None:
    configured = [SeriesConfig("h200", gpus=8, real_gpus=False)]
    inv = discover("auto", "n1", configured, 2, nvml=_absent, smi=_absent)
    assert inv.source == "config"
    assert [(g.index, g.uuid, g.series) for g in inv.gpus][:2] == [(0, "cfg-n1-0", "h200"), (1, "cfg-n1-1", "h200")]
    assert len(inv.gpus) == 8
    assert [(s.series, s.indices(), s.real_gpus, s.slots) for s in inv.series] == [
        ("h200", list(range(8)), False, 0),
        ("cpu", [], True, 2),
    ]


def test_config_mode_never_probes_and_keeps_a_configured_cpu_series() -> None:
    def probe() -> list[GpuInfo]:
        raise AssertionError("discovery: config must not probe hardware")

    configured = [SeriesConfig("cpu", gpus=0, slots=7), SeriesConfig("l40s", gpus=[2, 3])]
    inv = discover("config", "n2", configured, 4, nvml=probe, smi=probe)
    assert inv.source == "config"
    assert [g.index for g in inv.gpus] == [2, 3]
    assert [(s.series, s.slots) for s in inv.series] == [("l40s", 0), ("cpu", 7)]


def test_discovered_gpus_are_real_devices_grouped_by_series() -> None:
    inv = discover("auto", "n1", [], 0, nvml=_absent, smi=lambda: parse_nvidia_smi(SAMPLE))
    assert inv.source == "nvidia-smi"
    (series,) = inv.series
    assert (series.series, series.indices(), series.real_gpus) == ("h200", list(range(8)), True)


def test_a_required_source_that_fails_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="discovery: nvml: not here"):
        discover("nvml", "n1", [], 0, nvml=_absent, smi=_absent)
    with pytest.raises(ConfigError, match="found no GPUs"):
        discover("nvidia-smi", "n1", [], 0, nvml=_absent, smi=list)
