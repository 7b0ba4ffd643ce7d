"""Override and profile parsing, and building the JobSpec from a lab."""

from __future__ import annotations

import json
import pathlib
import re

import pytest
from starforge_api.job.v1 import job_spec_pb2

from cli import spec as specmod
from cli.errors import EXIT_USAGE, CliError
from cli.lab import find_lab
from cli.pack import pack_lab
from tests.unit.cli.helpers import git, write


def test_overrides_keep_order_and_split_at_first_equals() -> None:
    out = specmod.parse_overrides(["grpo.kl_coef=0.05", "policy.optimizer.lr=1e-6", "prompt=a=b", "name="])
    assert [(o.key, o.value) for o in out] == [
        ("grpo.kl_coef", "0.05"),
        ("policy.optimizer.lr", "1e-6"),
        ("prompt", "a=b"),
        ("name", ""),
    ]


@pytest.mark.parametrize("bad", ["noequals", "=1", "a..b=1", ".a=1", "a.=1", "a b=1", "a.b c=1"])
def test_bad_overrides(bad: str) -> None:
    with pytest.raises(CliError) as info:
        specmod.parse_override(bad)
    assert info.value.exit_code == EXIT_USAGE
    assert "-s" in info.value.message


def test_overrides_without_validation_pass_through() -> None:
    out = specmod.parse_overrides(["a..b=1", "x"], validate=False)
    assert [(o.key, o.value) for o in out] == [("a..b", "1"), ("x", "")]


def test_profiles() -> None:
    assert specmod.parse_profile("h200:8") == job_spec_pb2.PoolRequest(name="", profile="h200:8")
    assert specmod.parse_profile("cpu") == job_spec_pb2.PoolRequest(name="", profile="cpu")
    assert specmod.parse_profile("train=h200:8") == job_spec_pb2.PoolRequest(name="train", profile="h200:8")
    pools = specmod.parse_profiles(["train=h200:8", "rollout=h100:4"])
    assert [(p.name, p.profile) for p in pools] == [("train", "h200:8"), ("rollout", "h100:4")]


@pytest.mark.parametrize("bad", ["H200", "h200:", "h200:0", "h200:x", "=h200", "Train=h200:8", "h200:8:1", ""])
def test_bad_profiles(bad: str) -> None:
    with pytest.raises(CliError) as info:
        specmod.parse_profile(bad)
    assert info.value.exit_code == EXIT_USAGE


def test_several_pools_need_distinct_names() -> None:
    with pytest.raises(CliError, match=r"pool name each"):
        specmod.parse_profiles(["h200:8", "rollout=h200:8"])
    with pytest.raises(CliError, match=r"given twice: train"):
        specmod.parse_profiles(["train=h200:8", "train=h100:8"])


def test_check_options() -> None:
    with pytest.raises(CliError, match=r"--retries"):
        specmod.check_options(specmod.SubmitOptions("demo", retries=-1))
    with pytest.raises(CliError, match=r"--priority"):
        specmod.check_options(specmod.SubmitOptions("demo", priority=101))
    with pytest.raises(CliError, match=r"--train-dataset"):
        specmod.check_options(specmod.SubmitOptions("demo", train_dataset="not a ref"))
    pools, overrides = specmod.check_options(specmod.SubmitOptions("demo", profiles=["h200:8"], overrides=["a=1"]))
    assert pools[0].profile == "h200:8"
    assert overrides[0].key == "a"


def _build(lab: pathlib.Path, opts: specmod.SubmitOptions) -> job_spec_pb2.JobSpec:
    found = find_lab(lab)
    pools, overrides = specmod.check_options(opts)
    files = specmod.read_experiment(found, opts)
    packed = pack_lab(found.root, found.settings, allow_dirty=opts.allow_dirty)
    return specmod.build_spec(found, files, opts, packed, pools=pools, overrides=overrides, client_host="host1")


def test_build_spec_from_a_lab(lab: pathlib.Path) -> None:
    write(lab / "untracked.txt", "x\n")
    opts = specmod.SubmitOptions(
        "demo",
        profiles=["train=h200:8"],
        overrides=["lr=0.5", "grpo.kl_coef=0.05"],
        model="Qwen/Qwen3.5-9B",
        train_data="data/train.jsonl",
        train_dataset="alice/chat@v2",
        then=["export"],
        retries=2,
        priority=5,
        queue="q1",
        fleet="f1",
        framework_version="0.19.1",
    )
    spec = _build(lab, opts)
    assert spec.api_version == "forge/v2"
    assert spec.project == "@alice/lab"
    assert spec.experiment == "demo"
    assert spec.method == "custom/custom"
    assert spec.recipe_lock.digest == "ab" * 32
    assert spec.recipe_lock.runtime_id == "host"
    assert [(p.name, p.profile) for p in spec.pools] == [("train", "h200:8")]
    assert json.loads(spec.config_json) == {"image": "busybox:1", "observability": "platform", "lr": 0.1}
    assert [(o.key, o.value) for o in spec.overrides] == [("lr", "0.5"), ("grpo.kl_coef", "0.05")]
    assert spec.model == "Qwen/Qwen3.5-9B"
    assert spec.train_data == job_spec_pb2.DataRef(path="data/train.jsonl", dataset="alice/chat@v2")
    assert not spec.HasField("validation_data")
    assert spec.image == "busybox:1"  # from config.yaml
    assert spec.observability.mode == job_spec_pb2.OBSERVABILITY_MODE_PLATFORM
    assert list(spec.then_stages) == ["export"]
    assert (spec.retry_budget, spec.priority, spec.queue, spec.fleet) == (2, 5, "q1", "f1")
    assert spec.framework_version == "0.19.1"
    assert spec.workspace.digest
    assert len(spec.workspace.files) == 6
    prov = spec.provenance
    assert prov.git_commit == git(lab, "rev-parse", "HEAD").strip()
    assert prov.git_branch == "main"
    assert not prov.git_dirty
    assert list(prov.untracked_files) == ["untracked.txt"]
    assert prov.config_snapshot == (lab / "experiments/demo/config.yaml").read_text()
    assert prov.client_host == "host1"
    assert prov.client_version


def test_image_flag_wins_and_external_observability(lab: pathlib.Path) -> None:
    spec = _build(lab, specmod.SubmitOptions("demo", image="mine:2", observability_url="https://wandb.example/x"))
    assert spec.image == "mine:2"
    assert spec.observability == job_spec_pb2.Observability(
        mode=job_spec_pb2.OBSERVABILITY_MODE_EXTERNAL, url="https://wandb.example/x"
    )


def test_external_observability_needs_a_url(lab: pathlib.Path) -> None:
    write(lab / "experiments/demo/config.yaml", "observability: external\n")
    git(lab, "commit", "-q", "-am", "external")
    with pytest.raises(CliError, match=r"--observability-url"):
        _build(lab, specmod.SubmitOptions("demo"))


def test_bad_observability_value_points_at_the_line(lab: pathlib.Path) -> None:
    write(lab / "experiments/demo/config.yaml", "image: x\nobservability: grafana\n")
    with pytest.raises(CliError, match=r"config.yaml:2: `observability` must be platform or external"):
        _build(lab, specmod.SubmitOptions("demo", allow_dirty=True))


def test_dirty_spec_records_dirty(lab: pathlib.Path) -> None:
    write(lab / "src/model.py", "changed\n")
    spec = _build(lab, specmod.SubmitOptions("demo", allow_dirty=True))
    assert spec.provenance.git_dirty


def test_missing_train_sh_for_custom(lab: pathlib.Path) -> None:
    (lab / "experiments/demo/train.sh").unlink()
    with pytest.raises(CliError, match=re.escape("experiments/demo/train.sh not found")):
        specmod.read_experiment(find_lab(lab), specmod.SubmitOptions("demo"))
    # --no-validate leaves it to the console
    specmod.read_experiment(find_lab(lab), specmod.SubmitOptions("demo", validate=False))


def test_config_that_is_not_json(lab: pathlib.Path) -> None:
    write(lab / "experiments/demo/config.yaml", "x: .nan\n")
    git(lab, "commit", "-q", "-am", "nan")
    with pytest.raises(CliError, match=r"cannot be expressed as JSON"):
        _build(lab, specmod.SubmitOptions("demo"))


def test_dates_become_strings(lab: pathlib.Path) -> None:
    write(lab / "experiments/demo/config.yaml", "when: 2026-01-02\n")
    git(lab, "commit", "-q", "-am", "date")
    assert json.loads(_build(lab, specmod.SubmitOptions("demo")).config_json) == {"when": "2026-01-02"}


def test_train_data_must_be_packed(lab: pathlib.Path) -> None:
    found = find_lab(lab)
    packed = pack_lab(found.root, found.settings)
    specmod.check_workspace_paths(packed, specmod.SubmitOptions("demo", train_data="src/model.py"))
    specmod.check_workspace_paths(packed, specmod.SubmitOptions("demo", train_data="src"))
    specmod.check_workspace_paths(packed, specmod.SubmitOptions("demo", train_data="hf://datasets/x"))
    specmod.check_workspace_paths(packed, specmod.SubmitOptions("demo", train_data="x.jsonl", train_dataset="a/b"))
    with pytest.raises(CliError, match=re.escape("--validation-data data/val.jsonl: not in the packed lab")):
        specmod.check_workspace_paths(packed, specmod.SubmitOptions("demo", validation_data="data/val.jsonl"))


def test_retries_zero_is_sent_and_unset_is_left_to_the_server(lab: pathlib.Path) -> None:
    """`--retries 0` must reach the console as 0 (no retry), not as "unset" (the server default)."""
    zero = _build(lab, specmod.SubmitOptions("demo", retries=0))
    assert zero.HasField("retry_budget") and zero.retry_budget == 0
    unset = _build(lab, specmod.SubmitOptions("demo"))
    assert not unset.HasField("retry_budget")
