"""Small pieces: output helpers, templates, console helpers."""

from __future__ import annotations

import json
import os
import pathlib

import yaml
from starforge_api.catalog.v1 import recipe_pb2
from starforge_api.job.v1 import job_spec_pb2

from cli import templates
from cli.commands import console
from cli.output import Output, duration, human_bytes, sparkline


def test_sparkline() -> None:
    assert sparkline([]) == ""
    assert sparkline([1, 1, 1]) == "▅▅▅"
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7]) == "▁▂▃▄▅▆▇█"
    assert len(sparkline(list(range(1000)), width=30)) == 30
    assert sparkline([float("nan"), 1.0, 2.0]) == "▁█"


def test_human_units() -> None:
    assert human_bytes(0) == "0 B"
    assert human_bytes(1_500_000) == "1.5 MB"
    assert duration(45) == "45s"
    assert duration(150) == "2m"
    assert duration(3 * 3600 + 600) == "3h10m"


def test_custom_templates() -> None:
    lock = job_spec_pb2.RecipeLock(method="custom/custom", version="1.0.0", digest="d" * 64)
    config = yaml.safe_load(templates.custom_config("demo", lock))
    assert config == {"image": "", "observability": "platform"}
    sh = templates.train_sh("demo")
    assert sh.startswith("#!/usr/bin/env bash")
    assert "FORGE_OUT_DIR" in sh
    assert "import starforge" in sh
    assert "starforge.report(step=step, loss=loss)" in sh
    assert json.loads(templates.lock_json(lock))["digest"] == "d" * 64
    assert 'project: "@a/b"' in templates.lab_yaml("@a/b")


def test_recipe_config_nests_dotted_keys_with_defaults() -> None:
    recipe = recipe_pb2.Recipe(
        name="trl/sft",
        version="1.2.0",
        parameters=[
            recipe_pb2.Parameter(
                key="sft.lr", type=recipe_pb2.PARAMETER_TYPE_FLOAT, default_json="2e-05", min=0, max=1
            ),
            recipe_pb2.Parameter(
                key="sft.sched",
                type=recipe_pb2.PARAMETER_TYPE_STRING,
                default_json='"cosine"',
                choices=["cosine", "linear"],
                doc="schedule",
            ),
            recipe_pb2.Parameter(key="epochs", type=recipe_pb2.PARAMETER_TYPE_INT, required=True),
            recipe_pb2.Parameter(key="sft", type=recipe_pb2.PARAMETER_TYPE_STRING, default_json='"x"'),
        ],
    )
    text = templates.recipe_config("e", recipe, job_spec_pb2.RecipeLock(method="trl/sft", version="1.2.0"))
    data = yaml.safe_load(text)
    assert data["sft"] == {"lr": 2e-05, "sched": "cosine"}
    assert data["epochs"] is None
    assert data["observability"] == "platform"
    assert "# schedule (string; one of cosine, linear)" in text
    assert "# sft: x  - (string); set it with -s sft=VALUE" in text  # clashes with sft.*: a comment


def test_console_helpers(tmp_path: pathlib.Path) -> None:
    assert console.client_address("0.0.0.0:7070") == "127.0.0.1:7070"
    assert console.client_address("[::]:7070") == "[::1]:7070"
    assert console.client_address("10.1.2.3:7070") == "10.1.2.3:7070"
    assert console.default_state_dir({"STARFORGE_HOME": str(tmp_path)}) == tmp_path
    assert console.default_state_dir({"XDG_DATA_HOME": "/d"}) == pathlib.Path("/d/starforge")
    assert console.read_ready(tmp_path / "missing") is None
    (tmp_path / "r.json").write_text('{"addr')  # half written
    assert console.read_ready(tmp_path / "r.json") is None
    (tmp_path / "r.json").write_text('{"address": "127.0.0.1:1", "token_file": "t"}')
    assert console.read_ready(tmp_path / "r.json") == {"address": "127.0.0.1:1", "token_file": "t"}
    cmd = console._child_command(tmp_path, "127.0.0.1:1", "process", tmp_path / "r.json")
    assert any(console.CONSOLE_MODULE in part for part in cmd)  # the console module, run, never imported
    assert "--ready-file" in cmd


def test_down_removes_a_stale_pid_file(tmp_path: pathlib.Path) -> None:
    (tmp_path / console.PID_FILE).write_text(f"{os.getpid()}\n")  # alive, but not a console `sf up` started
    console.down(tmp_path, Output())
    assert not (tmp_path / console.PID_FILE).exists()
    assert console.pid_alive(os.getpid())
