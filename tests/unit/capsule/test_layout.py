"""capsule.json as the control plane produces it (capsule.layout), and the runner's reading of it."""

from __future__ import annotations

import hashlib
import json
import pathlib

import pytest

from capsule.layout import (
    FileEntry,
    PoolInfo,
    RunInfo,
    capsule_files_from_manifest,
    capsule_json,
    install_capsule,
)
from capsule.runner.capsule_file import parse_capsule

RUNNER = "runner-0123456789abcdef.pex"
SHA = hashlib.sha256(b"x").hexdigest()
RUN = RunInfo(
    method="custom/custom",
    adapter="custom",
    experiment="demo",
    entrypoint="experiments/demo/train.sh",
    config={"lr": 0.001},
    pools=[PoolInfo("main", "cpu", 1, 0)],
)


def build(**overrides: object) -> bytes:
    args: dict[str, object] = {
        "job_id": "j0123456789abc",
        "attempt_id": "j0123456789abc.1",
        "attempt_number": 1,
        "runner": RUNNER,
        "capsule_files": [
            FileEntry("sdk/starforge/__init__.py", SHA, 1),
            FileEntry(RUNNER, SHA, 1, True),
            FileEntry("bootstrap.sh", SHA, 1, True),
        ],
        "workspace_files": [
            FileEntry("experiments/demo/train.sh", SHA, 9, True),
            FileEntry("README.md", SHA, 1),
        ],
        "run": RUN,
    }
    args.update(overrides)
    return capsule_json(**args)  # type: ignore[arg-type]


def test_capsule_json_follows_the_documented_schema() -> None:
    doc = json.loads(build())
    assert sorted(doc) == sorted(["schema", "job_id", "attempt_id", "attempt_number", "runner", "files", "run"])
    assert doc["schema"] == "starforge.capsule/v2"
    assert doc["runner"] == RUNNER
    assert [(f["root"], f["path"]) for f in doc["files"]] == [
        ("capsule", "bootstrap.sh"),
        ("capsule", RUNNER),
        ("capsule", "sdk/starforge/__init__.py"),
        ("workspace", "README.md"),
        ("workspace", "experiments/demo/train.sh"),
    ]
    # protobuf's JSON mapping writes int64 as a string
    assert doc["files"][0] == {
        "root": "capsule",
        "path": "bootstrap.sh",
        "sha256": SHA,
        "size": "1",
        "executable": True,
    }
    assert doc["run"] == {
        "method": "custom/custom",
        "adapter": "custom",
        "experiment": "demo",
        "entrypoint": "experiments/demo/train.sh",
        "config_json": '{"lr": 0.001}',
        "stage": "CAPSULE_STAGE_TRAIN",
        "observability": "platform",
        "model": "",
        "train_data": "",
        "validation_data": "",
        "pools": [{"name": "main", "series": "cpu", "nodes": 1, "gpus_per_node": 0}],
        "observability_url": "",
        "observability_tool": "",
        "runtime_id": "",
        "runtime_python": "",
        "runtime_capabilities": [],
    }


def test_capsule_json_is_deterministic() -> None:
    assert build() == build()
    shuffled = build(
        workspace_files=[FileEntry("README.md", SHA, 1), FileEntry("experiments/demo/train.sh", SHA, 9, True)]
    )
    assert shuffled == build()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"runner": "runner.pex"}, "runner-<sha256"),
        ({"runner": "runner-fedcba9876543210.pex"}, "not among the capsule files"),
        ({"workspace_files": [FileEntry("../etc/passwd", SHA, 1)]}, "must not contain"),
        ({"workspace_files": [FileEntry("/etc/passwd", SHA, 1)]}, "must be relative"),
        ({"workspace_files": [FileEntry("a", "ABC", 1)]}, "64 lowercase hex"),
        ({"capsule_files": [FileEntry(RUNNER, SHA, 1), FileEntry("capsule.json", SHA, 1)]}, "cannot list itself"),
        ({"workspace_files": [FileEntry("a", SHA, 1), FileEntry("a", SHA, 1)]}, "twice"),
    ],
)
def test_capsule_json_refuses_bad_input(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build(**overrides)


def test_the_runner_reads_what_the_layout_writes() -> None:
    spec = parse_capsule(build())
    assert (spec.job_id, spec.attempt_id, spec.attempt_number, spec.runner) == (
        "j0123456789abc",
        "j0123456789abc.1",
        1,
        RUNNER,
    )
    assert spec.run.adapter == "custom"
    assert spec.run.entrypoint == "experiments/demo/train.sh"
    assert spec.run.config == {"lr": 0.001}
    assert spec.run.observability == "platform"
    assert spec.run.pools == [{"name": "main", "series": "cpu", "nodes": 1, "gpus_per_node": 0}]
    assert spec.run.stage == "train"


@pytest.mark.parametrize("stage", ["export", "eval"])
def test_the_stage_reaches_the_runner(stage: str) -> None:
    run = RunInfo(method="trl/sft", adapter="trl", experiment="demo", entrypoint="trl sft", stage=stage)
    assert parse_capsule(build(run=run)).run.stage == stage


def test_config_numbers_keep_their_type() -> None:
    run = RunInfo(method="trl/sft", adapter="trl", experiment="d", entrypoint="e", config={"a": 3, "b": 3.0})
    config = parse_capsule(build(run=run)).run.config
    assert (type(config["a"]), type(config["b"])) == (int, float)


def test_the_runner_refuses_another_schema() -> None:
    with pytest.raises(ValueError, match=r"not starforge\.capsule/v2 \(found 'starforge\.capsule/v1'\)"):
        parse_capsule(b'{"schema": "starforge.capsule/v1"}')


def test_install_capsule_from_a_build_manifest(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "build"
    (src / "sdk").mkdir(parents=True)
    (src / "bootstrap.sh").write_text("#!/bin/sh\n")
    (src / RUNNER).write_bytes(b"pex")
    manifest = {
        "runner": {"path": RUNNER, "sha256": SHA, "size": 3},
        "files": [
            {
                "path": "bootstrap.sh",
                "source": str(src / "bootstrap.sh"),
                "sha256": SHA,
                "size": 10,
                "executable": True,
            },
            {"path": RUNNER, "source": str(src / RUNNER), "sha256": SHA, "size": 3, "executable": True},
        ],
    }
    files = capsule_files_from_manifest(manifest)
    assert files[0] == FileEntry("bootstrap.sh", SHA, 10, True)
    dest = tmp_path / "capsule"
    install_capsule(manifest, b"{}", dest)
    assert (dest / "bootstrap.sh").read_text() == "#!/bin/sh\n"
    assert (dest / "bootstrap.sh").stat().st_mode & 0o111
    assert (dest / "capsule.json").read_bytes() == b"{}"
