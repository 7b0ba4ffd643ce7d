"""`sf up`'s local fleet: its CPU slots are executor.yaml's setting, and the console's view follows it."""

from __future__ import annotations

import os
import pathlib

import yaml

from control.embedded import MIN_CPU_SLOTS, default_cpu_slots, executor_config, local_cpu_slots


def _slots_in(path: pathlib.Path) -> int:
    doc = yaml.safe_load(path.read_text())
    return int(next(e["slots"] for e in doc["local"]["inventory"] if e["series"] == "cpu"))


def test_a_new_executor_yaml_gets_a_slot_per_core_and_at_least_the_minimum(tmp_path: pathlib.Path) -> None:
    assert default_cpu_slots() == max(MIN_CPU_SLOTS, os.cpu_count() or 1)
    path = executor_config(tmp_path, "process")
    assert _slots_in(path) == default_cpu_slots()
    assert local_cpu_slots(tmp_path) == default_cpu_slots()


def test_the_console_follows_the_slots_set_in_executor_yaml(tmp_path: pathlib.Path) -> None:
    path = executor_config(tmp_path, "process")
    path.write_text(path.read_text().replace(f"slots: {default_cpu_slots()}", "slots: 9"))
    assert executor_config(tmp_path, "process") == path  # same runtime: the edit is kept
    assert _slots_in(path) == 9
    assert local_cpu_slots(tmp_path) == 9


def test_a_missing_or_broken_setting_means_the_default(tmp_path: pathlib.Path) -> None:
    assert local_cpu_slots(tmp_path) == default_cpu_slots()
    for text in ("local: [", "local:\n  inventory:\n  - series: cpu\n    slots: -1\n", "local: 3\n"):
        (tmp_path / "executor.yaml").write_text(text)
        assert local_cpu_slots(tmp_path) == default_cpu_slots(), text
