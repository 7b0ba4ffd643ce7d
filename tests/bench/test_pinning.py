"""The benchmarks' CPU pinning settings are checked against the machine's CPUs, not the affinity
of the process that reads them: a floor's bare server runs pinned to the console's CPUs and
imports bench.common too, where the load generator's CPUs are not among its own."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench.common import REPO

CPUS = sorted(os.sched_getaffinity(0))  # the test's own: every CPU of the machine, unpinned


def _import_pinned_to(cpu: int, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    code = "import bench.common as c; print(c.CONSOLE_CPUS, c.LOADGEN_CPUS)"
    return subprocess.run(
        ["taskset", "--cpu-list", str(cpu), sys.executable, "-c", code],
        cwd=REPO,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_process_pinned_to_the_consoles_cpu_reads_the_load_generators_cpus() -> None:
    first, last = CPUS[0], CPUS[-1]
    env = {"STARFORGE_BENCH_CONSOLE_CPUS": str(first), "STARFORGE_BENCH_LOADGEN_CPUS": str(last)}
    r = _import_pinned_to(first, env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [f"[{first}]", f"[{last}]"]


def test_a_cpu_the_machine_does_not_have_is_refused_with_one_message() -> None:
    missing = 100_000  # no machine has it online
    r = _import_pinned_to(CPUS[0], {"STARFORGE_BENCH_LOADGEN_CPUS": str(missing)})
    assert r.returncode != 0
    assert f"STARFORGE_BENCH_LOADGEN_CPUS={missing}: CPUs [{missing}] are not all among" in r.stderr


@pytest.mark.parametrize("value", ["abc", "0-", "3-1", "1,,2", "-1"])
def test_a_list_taskset_would_not_take_is_refused_with_one_message(value: str) -> None:
    r = _import_pinned_to(CPUS[0], {"STARFORGE_BENCH_CONSOLE_CPUS": value})
    assert r.returncode != 0
    assert r.stderr.strip().splitlines() == [
        f"STARFORGE_BENCH_CONSOLE_CPUS={value}: not a CPU or a range of CPUs: "
        f"{next(p for p in value.split(',') if not p.isdigit())!r}; "
        "expected a list as taskset takes it: 0, 0,1 or 0-3,6"
    ]
