"""The config keys each framework version really has, so that an override the framework would
reject is refused at submit time, with the nearest valid names.

Data per framework version lives in ``recipes/frameworks/<framework>/<version>.json``:

    {"source": "...", "scripts": ["examples/run_sft.py", ...],
     "configs": {"<config name>": {"<dotted key>": <default>, ...}}}

generated from the framework itself (``python -m recipes.framework_keys verl|nemo-rl``):

- verl: ``verl/trainer/config/ppo_trainer.yaml`` composed with Hydra (defaults lists resolved),
  from the installed verl package (``pip install verl==<version> --no-deps``) when it is that
  version, else from the wheel in ``build/frameworks/`` (``make frameworks``: ``pip download
  verl==<version> --no-deps``), whose config tree is extracted beside it.
- NeMo-RL (not installable from the registries): ``examples/configs/*.yaml`` of a NeMo-RL
  checkout with ``defaults:`` inheritance resolved, and the Python files under ``examples/``.

A version without a data file is not checked (the declared parameters still are).
"""

from __future__ import annotations

import functools
import json
import pathlib
import sys
from collections.abc import Mapping
from typing import Any

from common.source import checkout

DATA_ROOT = pathlib.Path(__file__).resolve().parent / "frameworks"
# Wheels of framework versions other than the installed one (`make frameworks`): the checkout's
# build/frameworks (./build/frameworks when installed; only the generator and the tests read it).
WHEEL_DIR = (checkout() or pathlib.Path()) / "build" / "frameworks"
VERL_CONFIG_PREFIX = "verl/trainer/config/"
# Which framework config a method's overrides apply to: verl composes one trainer config; NeMo-RL
# loads the recipe's base_config (a parameter) from its checkout.
VERL_CONFIG = "ppo_trainer"
NEMO_RL_BASE_KEY = "base_config"


@functools.cache
def load(framework: str, version: str) -> dict[str, Any] | None:
    path = DATA_ROOT / framework / f"{version}.json"
    if not path.is_file():
        return None
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def config_keys(framework: str, version: str, config: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(config name, {dotted key: default}) the method's overrides apply to; None when unknown
    (no data for this version, or a base_config that is the lab's own file)."""
    data = load(framework, version)
    if data is None:
        return None
    if framework == "verl":
        name = VERL_CONFIG
    elif framework == "nemo-rl":
        name = str(config.get(NEMO_RL_BASE_KEY) or "")
    else:
        return None
    keys = data["configs"].get(name)
    return (name, keys) if keys is not None else None


# -- generating the data -------------------------------------------------------------------------


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """Leaf keys of a nested mapping as dotted names (empty mappings and lists are leaves)."""
    out: dict[str, Any] = {}
    if isinstance(node, Mapping) and (node or not prefix):
        for key, value in node.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    out[prefix[:-1]] = node
    return out


def nemo_rl_config(configs: pathlib.Path, name: str) -> dict[str, Any]:
    """examples/configs/<name> merged over its ``defaults:`` parents (NeMo-RL's load_config rule)."""
    import yaml
    from omegaconf import OmegaConf

    doc = yaml.safe_load((configs / name).read_text()) or {}
    parents = doc.pop("defaults", None)
    merged: Any = OmegaConf.create({})
    for parent in [parents] if isinstance(parents, str) else list(parents or []):
        merged = OmegaConf.merge(merged, OmegaConf.create(nemo_rl_config(configs, str(parent))))
    merged = OmegaConf.merge(merged, OmegaConf.create(doc))
    container: dict[str, Any] = OmegaConf.to_container(merged, resolve=False)  # type: ignore[assignment]
    return container


def generate_nemo_rl(checkout: pathlib.Path, source: str) -> dict[str, Any]:
    configs = checkout / "examples" / "configs"
    listing = checkout / "examples-files.txt"
    scripts = listing.read_text().split() if listing.is_file() else []
    return {
        "source": source,
        "scripts": sorted(scripts),
        "configs": {
            f"examples/configs/{p.name}": flatten(nemo_rl_config(configs, p.name))
            for p in sorted(configs.glob("*.yaml"))
        },
    }


def _installed_verl(version: str) -> pathlib.Path | None:
    """The installed verl's config tree, when the installed verl is `version`."""
    import importlib.metadata
    import importlib.util

    try:
        if importlib.metadata.version("verl") != version:
            return None
    except importlib.metadata.PackageNotFoundError:
        return None
    # Located, not imported: verl's __init__ needs ray, and its config tree needs only Hydra.
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        return None
    return pathlib.Path(next(iter(spec.submodule_search_locations))) / "trainer" / "config"


def verl_config_dir(version: str, wheel_dir: pathlib.Path = WHEEL_DIR) -> pathlib.Path:
    """verl `version`'s trainer config tree: the installed package's, or the one in its wheel
    (extracted once next to it). FileNotFoundError says how to get the wheel."""
    import zipfile

    installed = _installed_verl(version)
    if installed is not None:
        return installed
    wheel = wheel_dir / f"verl-{version}-py3-none-any.whl"
    target = wheel_dir / f"verl-{version}"
    config_dir = target / VERL_CONFIG_PREFIX
    if (config_dir / f"{VERL_CONFIG}.yaml").is_file():
        return config_dir
    if not wheel.is_file():
        raise FileNotFoundError(
            f"verl {version} is neither installed nor in {wheel_dir}: run `make frameworks` "
            f"(pip download verl=={version} --no-deps -d {wheel_dir})"
        )
    with zipfile.ZipFile(wheel) as z:
        members = [n for n in z.namelist() if n.startswith(VERL_CONFIG_PREFIX) and ".." not in n.split("/")]
        z.extractall(target, members)
    return config_dir


def generate_verl(source: str, config_dir: pathlib.Path) -> dict[str, Any]:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        cfg = compose(config_name=VERL_CONFIG)
    return {
        "source": source,
        "scripts": [],
        "configs": {VERL_CONFIG: flatten(OmegaConf.to_container(cfg, resolve=False))},
    }


def main(argv: list[str] | None = None) -> None:
    import argparse  # only this module's command line needs it (sf submit imports the module)

    parser = argparse.ArgumentParser(prog="python -m recipes.framework_keys")
    parser.add_argument("framework", choices=["verl", "nemo-rl"])
    parser.add_argument("version")
    parser.add_argument("--checkout", type=pathlib.Path, help="NeMo-RL: the checkout (or reference files)")
    parser.add_argument("--source", default="", help="where the data comes from (recorded in the file)")
    args = parser.parse_args(argv)
    if args.framework == "verl":
        try:
            config_dir = verl_config_dir(args.version)
        except FileNotFoundError as e:
            sys.exit(str(e))
        data = generate_verl(args.source or f"verl=={args.version} (PyPI)", config_dir)
    else:
        if args.checkout is None:
            sys.exit("nemo-rl needs --checkout")
        data = generate_nemo_rl(args.checkout, args.source)
    out = DATA_ROOT / args.framework / f"{args.version}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1, sort_keys=True, default=str) + "\n")
    print(f"wrote {out}: {sum(len(c) for c in data['configs'].values())} keys")


if __name__ == "__main__":
    main()
