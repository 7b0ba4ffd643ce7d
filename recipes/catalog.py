"""Load and validate recipe declarations; compute their digests and the catalog digest.

A recipe's digest is the sha256 of its declaration file, so a lab's recipe.lock.json pins exactly
the text the server publishes; any change to a recipe changes its digest and makes old locks stale.
"""

from __future__ import annotations

import dataclasses
import hashlib
import pathlib
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
    requires_image: bool = False
    multi_pool: bool = False
    pool_names: list[str] = field(default_factory=list)
    default_profile: str = ""
    default_observability: str = "platform"
    stages: list[str] = field(default_factory=list)
    # Parameters that hold a global batch size and how the data-parallel size divides it.
    batch_size_key: str = ""
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
    for p in decl.parameters:
        if p.type not in PARAM_TYPES:
            raise ConfigError(f"{where}: parameter {p.key}: type must be one of {', '.join(PARAM_TYPES)}")


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
