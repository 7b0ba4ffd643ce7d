"""What every framework adapter reads from capsule.json and the environment, checked once.

The rules are the platform's, not a framework's: --model is a HuggingFace id or a lab path,
--train-data / --validation-data are lab paths (or paths inside a mounted --train-dataset), the
pools come from the profile, checkpoints live in FORGE_OUT_DIR. Anything missing is a
PrecheckError that says which flag or variable to set: an adapter never guesses.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass
from typing import Any

from ..errors import PrecheckError
from ..paths import safe_relative
from .base import AdapterContext

# Where the executor mounts a resolved --train-dataset (executor_svc/capsule_env.py: <NAME>_DATA_DIR).
TRAIN_DATASET_DIR = "TRAIN_DATA_DIR"
URL_MARK = "://"


@dataclass(frozen=True)
class Pool:
    name: str
    series: str
    nodes: int
    gpus_per_node: int

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


def pools(ctx: AdapterContext) -> list[Pool]:
    """capsule.json run.pools; at least one, each with whole numbers."""
    out: list[Pool] = []
    for raw in ctx.run.pools:
        try:
            pool = Pool(str(raw["name"]), str(raw["series"]), int(raw["nodes"]), int(raw["gpus_per_node"]))
        except (KeyError, TypeError, ValueError):
            raise PrecheckError(f"capsule.json run.pools has a malformed pool: {raw!r}") from None
        if pool.nodes < 1 or pool.gpus_per_node < 0:
            raise PrecheckError(f"pool {pool.name!r} asks for {pool.nodes} node(s) x {pool.gpus_per_node} GPUs")
        out.append(pool)
    if not out:
        raise PrecheckError(f"capsule.json run.pools is empty; {ctx.run.method} needs the pool it runs on")
    return out


def single_pool(ctx: AdapterContext) -> Pool:
    found = pools(ctx)
    if len(found) != 1:
        names = ", ".join(p.name for p in found)
        raise PrecheckError(f"{ctx.run.method} runs on one pool; capsule.json has {len(found)} ({names})")
    return found[0]


def out_dir(ctx: AdapterContext) -> pathlib.Path:
    """FORGE_OUT_DIR: persistent per job, where checkpoints go."""
    value = ctx.environ.get("FORGE_OUT_DIR", "")
    if not value:
        raise PrecheckError("FORGE_OUT_DIR is not set; the executor must give the job its output directory")
    return pathlib.Path(value)


def resuming(ctx: AdapterContext) -> bool:
    return ctx.environ.get("FORGE_RESUME") == "1"


def model(ctx: AdapterContext, *, required: bool) -> str:
    """--model: a lab path (made absolute) when the workspace has it, else a HuggingFace id or URL."""
    value = ctx.run.model.strip()
    if not value:
        if required:
            raise PrecheckError(f"{ctx.run.method} needs a model: submit with --model <hf-id-or-lab-path>")
        return ""
    return model_ref(ctx, value)


def model_ref(ctx: AdapterContext, value: str) -> str:
    """A model named in the config by --model's rules (critic.model.path, a reward model)."""
    relative = safe_relative(value.removeprefix("./"))
    if relative is not None and (ctx.workspace_dir / relative).exists():
        return str(ctx.workspace_dir / relative)
    return value


def data_path(ctx: AdapterContext, value: str, flag: str, *, dataset_env: str = "") -> str:
    """A data flag's value as an absolute path (or the URL as given).

    Inside a mounted dataset (``dataset_env`` names its directory variable) the path is relative
    to it; otherwise it is a lab path and must be in the packed workspace.
    """
    value = value.strip()
    if URL_MARK in value:
        return value
    relative = safe_relative(value.removeprefix("./").rstrip("/"))
    if relative is None:
        raise PrecheckError(f"{flag} {value!r} must be a relative path (lab path or path inside the dataset)")
    mounted = ctx.environ.get(dataset_env, "") if dataset_env else ""
    root = pathlib.Path(mounted) if mounted else ctx.workspace_dir
    path = root / relative
    if not path.exists():
        where = f"the dataset mounted at {mounted}" if mounted else "the packed lab"
        raise PrecheckError(f"{flag} {value}: not found in {where}")
    return str(path)


def train_data(ctx: AdapterContext, *, required: bool) -> str:
    if not ctx.run.train_data.strip():
        if required:
            raise PrecheckError(
                f"{ctx.run.method} needs training data: submit with --train-data <lab-path> "
                "(or --train-dataset owner/name@v --train-data <path-inside-it>)"
            )
        return ""
    return data_path(ctx, ctx.run.train_data, "--train-data", dataset_env=TRAIN_DATASET_DIR)


def validation_data(ctx: AdapterContext) -> str:
    if not ctx.run.validation_data.strip():
        return ""
    return data_path(ctx, ctx.run.validation_data, "--validation-data")


def lab_file(ctx: AdapterContext, value: str, key: str) -> str:
    """A config value naming a lab file (a reward function, a base YAML), made absolute."""
    relative = safe_relative(value.removeprefix("./"))
    if relative is None or not (ctx.workspace_dir / relative).is_file():
        raise PrecheckError(f"{key}={value}: not a file in the packed lab")
    return str(ctx.workspace_dir / relative)


def flat_config(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """run.config (nested, as resolved by the server) as dotted keys, in the server's order."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flat_config(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def apply_aliases(flat: dict[str, Any], aliases: dict[str, str]) -> dict[str, Any]:
    """StarForge aliases (recipe `maps_to`) renamed to the framework's real keys."""
    return {aliases.get(key, key): value for key, value in flat.items()}


def refuse_owned(flat: dict[str, Any], owned: frozenset[str], method: str) -> None:
    """Keys the adapter sets from flags, pools and FORGE_* must not come from the config as well."""
    clash = sorted(k for k in flat if k in owned)
    if clash:
        raise PrecheckError(
            f"{method}: {', '.join(clash)} is set by StarForge (from --model/--train-data/--profile/"
            "FORGE_OUT_DIR); remove it from config.yaml"
        )
