"""Load and validate recipe declarations; compute their digests and the catalog digest.

A recipe's digest is the sha256 of its declaration file, so a lab's recipe.lock.json pins exactly
the text the server publishes; any change to a recipe changes its digest and makes old locks stale.
"""

from __future__ import annotations

import dataclasses
import hashlib
import pathlib
import shlex
import string
from dataclasses import dataclass, field
from typing import Any

import yaml

from common.config import ConfigError, build_dataclass

CATALOG_ROOT = pathlib.Path(__file__).resolve().parent / "catalog"
PARAM_TYPES = ("int", "float", "string", "bool", "string_list")


@dataclass(frozen=True)
class ParameterDecl:
    key: str
    type: str
    default: Any = None
    min: float | None = None
    max: float | None = None
    choices: list[str] = field(default_factory=list)
    doc: str = ""
    required: bool = False
    # A StarForge alias: the framework has no key of this name; the adapter writes the value to
    # `maps_to` (the framework's real key). Set only where a documented seed command line needs it.
    maps_to: str = ""


@dataclass(frozen=True)
class RuntimeDecl:
    framework_version: str
    runtime_id: str
    image: str = ""
    python: str = ""
    capabilities: list[str] = field(default_factory=list)
    default: bool = False


@dataclass(frozen=True)
class RecipeDecl:
    name: str
    framework: str
    version: str
    description: str
    adapter: str
    entrypoint: str
    runtimes: list[RuntimeDecl]
    parameters: list[ParameterDecl] = field(default_factory=list)
    metrics: list[str] = field(default_factory=list)
    artifacts: list[str] = field(default_factory=list)
    requires_model: bool = False
    requires_train_data: bool = False
    # verl validates on data.val_files at every test_freq: without --validation-data it cannot start.
    requires_validation_data: bool = False
    requires_image: bool = False
    multi_pool: bool = False
    pool_names: list[str] = field(default_factory=list)
    default_profile: str = ""
    default_observability: str = "platform"
    stages: list[str] = field(default_factory=list)
    # The command each stage runs (catalog methods; custom/custom runs experiments/<exp>/<stage>.sh).
    # One line split like a shell would, each word's {placeholders} filled in by the runner's
    # adapter (STAGE_PLACEHOLDERS); it reaches the runner as capsule.json run.entrypoint.
    stage_commands: dict[str, str] = field(default_factory=dict)
    # The parameter holding the global batch size (samples per optimizer step across all ranks):
    # admission refuses a value that the data-parallel size does not divide.
    global_batch_key: str = ""
    # Multi-pool methods: the pool whose GPUs form the data-parallel group (verl's trainer pool);
    # the global batch is divided across it, not across the rollout pool. Empty: every pool.
    data_parallel_pool: str = ""
    # Whether the method runs on a CPU-only pool (`--profile cpu`): TRL does (slowly); verl and
    # NeMo-RL need GPUs (vLLM, NCCL).
    runs_on_cpu: bool = False
    # The most nodes one pool may span; 0 = no limit. TRL's CLI launches accelerate on one machine.
    max_nodes: int = 0
    digest: str = ""
    path: str = ""

    def runtime(self, framework_version: str = "") -> RuntimeDecl | None:
        if not framework_version:
            return next((r for r in self.runtimes if r.default), self.runtimes[0] if self.runtimes else None)
        return next((r for r in self.runtimes if r.framework_version == framework_version), None)

    def parameter(self, key: str) -> ParameterDecl | None:
        return next((p for p in self.parameters if p.key == key), None)


@dataclass(frozen=True)
class Catalog:
    recipes: dict[str, RecipeDecl]
    digest: str
    version: str

    def get(self, name: str) -> RecipeDecl | None:
        return self.recipes.get(name)

    def names(self) -> list[str]:
        return sorted(self.recipes)


def _validate(decl: RecipeDecl, path: pathlib.Path) -> None:
    where = str(path)
    if "/" not in decl.name or decl.name.split("/")[0] != decl.framework:
        raise ConfigError(f"{where}: name must be '<framework>/<method>' with framework {decl.framework!r}")
    expected = path.parent.relative_to(path.parents[2]).as_posix()
    if decl.name != expected:
        raise ConfigError(f"{where}: name {decl.name!r} does not match its folder {expected!r}")
    if not decl.runtimes:
        raise ConfigError(f"{where}: at least one runtime is required")
    if sum(r.default for r in decl.runtimes) != 1:
        raise ConfigError(f"{where}: exactly one runtime must be the default")
    versions = [r.framework_version for r in decl.runtimes]
    if len(set(versions)) != len(versions):
        raise ConfigError(f"{where}: a framework version is listed twice")
    _check_images(decl, where)
    keys = [p.key for p in decl.parameters]
    if len(set(keys)) != len(keys):
        raise ConfigError(f"{where}: a parameter key is declared twice")
    for p in decl.parameters:
        _check_parameter(p, keys, where)
    _check_pools(decl, where)
    _check_stages(decl, where)


def _check_images(decl: RecipeDecl, where: str) -> None:
    """requires_image: the user (or the console) must name the image, and the catalog names none;
    otherwise every runtime names the image of its framework version."""
    for r in decl.runtimes:
        if decl.requires_image and r.image:
            raise ConfigError(
                f"{where}: runtime {r.framework_version} names image {r.image!r} but requires_image is true "
                "(the submission must name the image): drop one"
            )
        if not decl.requires_image and not r.image:
            raise ConfigError(
                f"{where}: runtime {r.framework_version} names no image; give its image, or set requires_image: true"
            )


# What a stage command may name (filled in by capsule/runner/adapters/stages.py).
STAGE_PLACEHOLDERS = frozenset({"checkpoint", "export_dir", "model", "validation_data", "stage_script", "out_dir"})


def _check_stages(decl: RecipeDecl, where: str) -> None:
    """Every stage of a catalog method has a command naming only known placeholders."""
    if decl.adapter == "custom":
        if decl.stage_commands:
            raise ConfigError(f"{where}: custom/custom stages run experiments/<exp>/<stage>.sh, not stage_commands")
        return
    if set(decl.stage_commands) != set(decl.stages):
        raise ConfigError(f"{where}: stage_commands must define exactly the stages {decl.stages}")
    for stage, command in decl.stage_commands.items():
        try:
            words = shlex.split(command)
            names = {name for word in words for _, name, _, _ in string.Formatter().parse(word) if name is not None}
        except ValueError as exc:
            raise ConfigError(f"{where}: stage_commands.{stage}: {exc}") from None
        unknown = names - STAGE_PLACEHOLDERS
        if not words or unknown:
            raise ConfigError(
                f"{where}: stage_commands.{stage} names {sorted(unknown) or 'nothing'}; "
                f"placeholders are {', '.join(sorted(STAGE_PLACEHOLDERS))}"
            )


def _check_parameter(p: ParameterDecl, keys: list[str], where: str) -> None:
    """A declaration mistake (unknown type, a default of the wrong type, an alias of a declared key)
    would otherwise surface as a refused submission of every user of the method."""
    at = f"{where}: parameter {p.key}"
    if not p.key or any(not part for part in p.key.split(".")):
        raise ConfigError(f"{at}: the key must be a dotted name")
    if p.type not in PARAM_TYPES:
        raise ConfigError(f"{at}: type must be one of {', '.join(PARAM_TYPES)}")
    if p.default is None:
        # `sf new` writes every default into config.yaml; a null there is refused on submit.
        raise ConfigError(f"{at}: a default is required")
    if not _has_type(p.type, p.default):
        raise ConfigError(f"{at}: default {p.default!r} is not a {p.type}")
    if p.type in ("int", "float"):
        if p.min is not None and p.default < p.min:
            raise ConfigError(f"{at}: default {p.default} is below min {p.min:g}")
        if p.max is not None and p.default > p.max:
            raise ConfigError(f"{at}: default {p.default} is above max {p.max:g}")
    if p.choices:
        if p.type != "string":
            raise ConfigError(f"{at}: choices are for string parameters")
        if p.default not in p.choices:
            raise ConfigError(f"{at}: default {p.default!r} is not one of its choices")
    if not p.doc:
        raise ConfigError(f"{at}: doc is required (one line: what it does)")
    if p.maps_to and (p.maps_to == p.key or p.maps_to in keys):
        raise ConfigError(f"{at}: maps_to {p.maps_to!r} must be a framework key that is not declared itself")


def _has_type(kind: str, value: Any) -> bool:
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _check_pools(decl: RecipeDecl, where: str) -> None:
    if decl.multi_pool != bool(decl.pool_names):
        raise ConfigError(f"{where}: a multi_pool method names its pools (pool_names), and only it does")
    if decl.data_parallel_pool and decl.data_parallel_pool not in decl.pool_names:
        raise ConfigError(f"{where}: data_parallel_pool {decl.data_parallel_pool!r} is not one of pool_names")
    if decl.global_batch_key:
        batch = decl.parameter(decl.global_batch_key)
        if batch is None or batch.type != "int":
            raise ConfigError(f"{where}: global_batch_key {decl.global_batch_key!r} must be a declared int parameter")
    if decl.max_nodes < 0:
        raise ConfigError(f"{where}: max_nodes must be >= 0 (0 = no limit)")


def load_recipe(path: pathlib.Path) -> RecipeDecl:
    data = path.read_bytes()
    raw = yaml.safe_load(data)
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping")
    decl = build_dataclass(RecipeDecl, raw, str(path))
    decl = dataclasses.replace(decl, digest=hashlib.sha256(data).hexdigest(), path=str(path))
    _validate(decl, path)
    return decl


def load_catalog(root: pathlib.Path = CATALOG_ROOT) -> Catalog:
    recipes: dict[str, RecipeDecl] = {}
    for path in sorted(root.glob("*/*/recipe.yaml")):
        decl = load_recipe(path)
        recipes[decl.name] = decl
    h = hashlib.sha256()
    for name in sorted(recipes):
        h.update(f"{name} {recipes[name].version} {recipes[name].digest}\n".encode())
    digest = h.hexdigest()
    return Catalog(recipes=recipes, digest=digest, version=digest[:12])
