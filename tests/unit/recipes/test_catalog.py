"""The published catalog: every method loads, matches its adapter, and admits the seed command lines."""

from __future__ import annotations

import hashlib
import pathlib

import pytest
import yaml
from starforge_api.job.v1 import job_spec_pb2

from capsule.runner.adapters import REGISTRY, nemo_rl, trl, verl
from cli.templates import recipe_config
from common import profiles
from common.config import ConfigError
from control.catalog_api import lock_for, recipe_to_proto
from control.config import DEFAULT_PROFILES
from recipes.catalog import CATALOG_ROOT, load_catalog, load_recipe
from tests.unit.recipes.helpers import CATALOG, recipe, resolved

PUBLISHED = {
    "custom/custom", "trl/sft", "trl/dpo", "trl/kto", "trl/grpo", "verl/ppo", "verl/grpo", "nemo-rl/sft", "nemo-rl/grpo",
}  # fmt: skip
OWNED = {"trl": trl.OWNED, "verl": verl.OWNED, "nemo-rl": nemo_rl.OWNED}
ALIASES = {"trl": {}, "verl": {}, "nemo-rl": nemo_rl.ALIASES}
METHODS = {"trl": set(trl.METHODS), "verl": set(verl.ADVANTAGE_ESTIMATORS), "nemo-rl": set(nemo_rl.SCRIPTS)}


def test_every_method_is_published_with_a_runner_adapter() -> None:
    assert set(CATALOG.names()) == PUBLISHED
    for name in CATALOG.names():
        r = recipe(name)
        assert r.adapter in REGISTRY, name
        if r.framework != "custom":
            assert name.split("/")[1] in METHODS[r.adapter], name
            assert r.parameters and r.metrics and r.artifacts and r.default_profile, name
        assert r.digest == hashlib.sha256(pathlib.Path(r.path).read_bytes()).hexdigest()
    assert load_catalog().digest == CATALOG.digest


def test_inputs_and_shapes_follow_the_framework() -> None:
    for name in CATALOG.names():
        r = recipe(name)
        needs_inputs = r.framework in ("trl", "verl")
        assert (r.requires_model, r.requires_train_data) == (needs_inputs, needs_inputs), name
        assert r.requires_validation_data == (r.framework == "verl"), name
        assert r.requires_image == (name == "custom/custom"), name
        assert r.runs_on_cpu == (r.framework in ("trl", "custom")), name
    for name in ("verl/grpo", "verl/ppo"):
        r = recipe(name)
        assert (r.multi_pool, r.pool_names, r.data_parallel_pool) == (True, ["train", "rollout"], "train")
        assert r.global_batch_key == "data.train_batch_size"
    assert all(recipe(n).max_nodes == 1 for n in ("trl/sft", "trl/dpo", "trl/kto", "trl/grpo"))


def test_declared_keys_never_collide_with_what_the_adapter_sets() -> None:
    for name in CATALOG.names():
        r = recipe(name)
        if r.adapter == "custom":
            continue
        keys = {p.key for p in r.parameters}
        assert not keys & OWNED[r.adapter], (name, keys & OWNED[r.adapter])
        assert {p.key: p.maps_to for p in r.parameters if p.maps_to} == {
            k: v for k, v in ALIASES[r.adapter].items() if k in keys
        }, name


def test_sf_new_config_yaml_of_every_method_is_admitted_as_written() -> None:
    """`sf new --method M` writes every default into config.yaml; submitting it unchanged must work."""
    for name in CATALOG.names():
        r = recipe(name)
        text = recipe_config("exp", recipe_to_proto(r), lock_for(CATALOG, name, ""))
        config = yaml.safe_load(text) or {}
        assert resolved(name, config) == resolved(name), name


def test_seed_command_lines_are_admissible() -> None:
    # sf submit my-exp -s policy.optimizer.kwargs.lr=1e-6 -s grpo.kl_coef=0.05   (nemo-rl/grpo)
    config = resolved("nemo-rl/grpo", overrides=["policy.optimizer.kwargs.lr=1e-6", "grpo.kl_coef=0.05"])
    assert config["policy"]["optimizer"]["kwargs"]["lr"] == 1e-6
    assert config["grpo"]["kl_coef"] == 0.05
    # sf submit my-exp --profile train=h200:8 --profile rollout=h100:2   (verl/grpo multi-pool)
    grpo = recipe("verl/grpo")
    pools = profiles.resolve(
        [
            job_spec_pb2.PoolRequest(name="train", profile="h200:8"),
            job_spec_pb2.PoolRequest(name="rollout", profile="h100:2"),
        ],
        DEFAULT_PROFILES,
        grpo.default_profile,
    )
    assert grpo.multi_pool and {p.name for p in pools} <= set(grpo.pool_names)
    # the global batch is divided across the data-parallel (train) pool only: 1024 % 8, not 1024 % 10
    dp = sum(p.nodes * p.gpus_per_node for p in pools if p.name == grpo.data_parallel_pool)
    assert resolved("verl/grpo")["data"]["train_batch_size"] % dp == 0
    # sf submit my-grpo --profile h200:8; the default profiles of every method
    for name in CATALOG.names():
        r = recipe(name)
        for text in {"h200:8", r.default_profile}:
            (p,) = profiles.resolve([job_spec_pb2.PoolRequest(profile=text)], DEFAULT_PROFILES, r.default_profile)
            gpus = p.nodes * p.gpus_per_node
            if r.global_batch_key and gpus:
                batch = r.parameter(r.global_batch_key)
                assert batch is not None and batch.default % gpus == 0, (name, text)
        # sf submit my-exp --then export --then eval
        assert {"export", "eval"} <= set(r.stages), name


BASE = """\
name: trl/x
framework: trl
version: 1.0.0
description: d
adapter: trl
entrypoint: trl x
runtimes: [{framework_version: "1", runtime_id: r, image: registry.local/x:1, default: true}]
"""


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("parameters: [{key: a, type: int, doc: d}]", "parameter a: a default is required"),
        ("parameters: [{key: a, type: float, default: 1e-6, doc: d}]", "default '1e-6' is not a float"),
        ("parameters: [{key: a, type: int, default: 5, max: 3, doc: d}]", "default 5 is above max 3"),
        ("parameters: [{key: a, type: string, default: x, choices: [y], doc: d}]", "not one of its choices"),
        ("parameters: [{key: a, type: int, default: 1}]", "parameter a: doc is required"),
        ("parameters: [{key: a..b, type: int, default: 1, doc: d}]", "must be a dotted name"),
        (
            "parameters: [{key: a, type: int, default: 1, doc: d}, {key: a, type: int, default: 1, doc: d}]",
            "declared twice",
        ),
        (
            "parameters: [{key: a, type: int, default: 1, doc: d}, {key: b, type: int, default: 1, maps_to: a, doc: d}]",
            "maps_to 'a' must be a framework key that is not declared",
        ),
        ("multi_pool: true", "names its pools"),
        ("global_batch_key: nope", "global_batch_key 'nope' must be a declared int parameter"),
        ("pool_names: [a]\nmulti_pool: true\ndata_parallel_pool: b", "data_parallel_pool 'b' is not one of"),
        ("stages: [export, eval]\nstage_commands: {export: x}", r"stage_commands must define exactly the stages"),
        ("stages: [export]\nstage_commands: {export: 'x {nope}'}", r"names \['nope'\]; placeholders are"),
        ('stages: [export]\nstage_commands: {export: "x \'open"}', "stage_commands.export: No closing quotation"),
    ],
)
def test_declaration_mistakes_are_refused_when_the_catalog_loads(
    tmp_path: pathlib.Path, extra: str, message: str
) -> None:
    path = tmp_path / "catalog" / "trl" / "x" / "recipe.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(BASE + extra + "\n")
    with pytest.raises(ConfigError, match=message):
        load_recipe(path)


def test_the_shipped_catalog_is_the_one_loaded() -> None:
    assert {p.parent.relative_to(CATALOG_ROOT).as_posix() for p in CATALOG_ROOT.glob("*/*/recipe.yaml")} == PUBLISHED


def test_docs_list_every_method_and_parameter() -> None:
    text = (pathlib.Path(__file__).resolve().parents[3] / "docs" / "recipes.md").read_text()
    for name in CATALOG.names():
        assert f"### {name}\n" in text, name
        for p in recipe(name).parameters:
            assert f"| `{p.key}` |" in text, (name, p.key)
