"""`-s key=value` overrides: typed, range-checked against the method, applied to a copy of the config.

One implementation for both sides: `sf` checks overrides against the recipe the console publishes
before it packs anything, and admission checks them again (the server never trusts the client)."""

from __future__ import annotations

import copy
import difflib
import json
import math
from collections.abc import Sequence
from typing import Any

from starforge_api.control.v1 import error_reason_pb2
from starforge_api.job.v1 import job_spec_pb2

from common import errors
from recipes import framework_keys
from recipes.catalog import ParameterDecl, RecipeDecl

# Top-level config.yaml keys that belong to the platform, not to the method.
PLATFORM_KEYS = frozenset({"image", "observability", "data", "model", "env", "description", "resources", "secrets"})
TRUE = {"true", "yes", "1", "on"}
FALSE = {"false", "no", "0", "off"}


def _bad(key: str, message: str) -> errors.InvalidArgument:
    return errors.InvalidArgument(
        message,
        reason=error_reason_pb2.ERROR_REASON_BAD_OVERRIDE,
        field_violations=(errors.FieldViolation(f"overrides[{key}]", message),),
    )


def parse_value(p: ParameterDecl, raw: str, *, source: str = "-s") -> Any:
    t = p.type
    try:
        if t == "int":
            value: Any = int(raw, 10)
        elif t == "float":
            value = float(raw)
            if math.isnan(value) or math.isinf(value):
                raise ValueError
        elif t == "bool":
            low = raw.strip().lower()
            if low not in TRUE | FALSE:
                raise ValueError
            value = low in TRUE
        elif t == "string_list":
            value = [v.strip() for v in raw.split(",") if v.strip()]
        elif t == "any":
            value = _loose(raw)
        else:
            value = raw
    except ValueError:
        raise _bad(p.key, f"{source} {p.key}={raw}: expected {'an' if t == 'int' else 'a'} {t}") from None
    check_value(p, value, source=f"{source} {p.key}={raw}")
    return value


def check_value(p: ParameterDecl, value: Any, *, source: str) -> None:
    if p.type in ("int", "float"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _bad(p.key, f"{source}: expected a number")
        if p.min is not None and value < p.min:
            raise _bad(p.key, f"{source}: {value} is below the minimum {p.min:g} for {p.key}")
        if p.max is not None and value > p.max:
            raise _bad(p.key, f"{source}: {value} is above the maximum {p.max:g} for {p.key}")
    if p.choices and value not in p.choices:
        raise _bad(p.key, f"{source}: {value!r} is not one of {', '.join(p.choices)}")


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _set(d: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node = d
    for part in parts[:-1]:
        nxt = node.get(part)
        if not isinstance(nxt, dict):
            nxt = {}
            node[part] = nxt
        node = nxt
    node[parts[-1]] = value


def _infer(key: str, current: Any) -> ParameterDecl:
    """custom/custom: a config key's type is the type of its value in config.yaml."""
    if isinstance(current, bool):
        t = "bool"
    elif isinstance(current, int):
        t = "int"
    elif isinstance(current, float):
        t = "float"
    elif isinstance(current, list):
        t = "string_list"
    else:
        t = "string"
    return ParameterDecl(key=key, type=t)


def suggestion(key: str, valid: Sequence[str]) -> str:
    close = difflib.get_close_matches(key, valid, n=3, cutoff=0.5)
    if close:
        return f"; did you mean {' or '.join(close)}?"
    return f"; valid keys: {', '.join(sorted(valid)[:12])}" if valid else "; this method has no parameters"


def _framework(
    recipe: RecipeDecl,
    flat_config: dict[str, Any],
    overrides: Sequence[job_spec_pb2.Override],
    framework_version: str = "",
) -> tuple[str, dict[str, Any]]:
    """(what the keys are, {key: default}) of the framework config the method's overrides apply to,
    for that framework version (empty: the recipe's default runtime); empty when that framework
    version has no key data."""
    runtime = recipe.runtime(framework_version)
    if runtime is None or recipe.framework not in ("verl", "nemo-rl"):
        return "", {}
    chosen = {p.key: p.default for p in recipe.parameters}
    chosen.update(flat_config)
    chosen.update({o.key.strip(): o.value for o in overrides})
    found = framework_keys.config_keys(recipe.framework, runtime.framework_version, chosen)
    if found is None:
        return "", {}
    name, keys = found
    return f"{recipe.framework} {runtime.framework_version} ({name})", keys


def _framework_param(key: str, default: Any) -> ParameterDecl:
    """An undeclared framework key: booleans stay booleans, anything else is read loosely
    (Hydra/OmegaConf types an override by its text, and many defaults are interpolations)."""
    return ParameterDecl(key=key, type="bool" if isinstance(default, bool) else "any")


def _loose(raw: str) -> Any:
    for parse in (int, float):
        try:
            value = parse(raw)
        except ValueError:
            continue
        if not (isinstance(value, float) and (math.isnan(value) or math.isinf(value))):
            return value
    return raw


def _unknown_key(
    recipe: RecipeDecl, key: str, source: str, declared: dict[str, ParameterDecl], fw: str, keys: dict[str, Any]
) -> errors.InvalidArgument:
    if fw:
        return _bad(
            key,
            f"{source} {key}: neither a parameter of {recipe.name} nor a key of {fw}"
            f"{suggestion(key, list(dict.fromkeys([*declared, *keys])))}",
        )
    return _bad(key, f"{source} {key}: {recipe.name} has no parameter {key!r}{suggestion(key, list(declared))}")


def resolve_config(
    recipe: RecipeDecl,
    config: dict[str, Any],
    overrides: Sequence[job_spec_pb2.Override],
    framework_version: str = "",
) -> dict[str, Any]:
    """Defaults <- config.yaml <- overrides, each checked against the method's parameters.

    `framework_version` chooses whose framework keys apply (empty: the default runtime's); each
    version is checked against its own key data.

    verl and NeMo-RL methods also take any key their framework's config has (recipes/frameworks/):
    a key neither declared nor in that config is refused with the nearest valid names, as the
    framework itself would reject it (verl composes in strict mode) or silently add it.
    """
    resolved: dict[str, Any] = {}
    for p in recipe.parameters:
        if p.default is not None:
            _set(resolved, p.key, copy.deepcopy(p.default))
    flat_config = _flatten({k: v for k, v in config.items() if k not in PLATFORM_KEYS})
    declared = {p.key: p for p in recipe.parameters}
    fw, fw_keys = _framework(recipe, flat_config, overrides, framework_version)
    if recipe.parameters:
        for key, value in flat_config.items():
            decl = declared.get(key)
            if decl is None and fw:
                if key not in fw_keys:
                    raise _unknown_key(recipe, key, "config.yaml", declared, fw, fw_keys)
            elif decl is None and not any(key.startswith(d + ".") for d in declared):
                raise _bad(
                    key,
                    f"config.yaml key {key!r} is not a parameter of {recipe.name}{suggestion(key, list(declared))}",
                )
            if decl is not None:
                check_value(decl, value, source=f"config.yaml {key}")
    for k, v in config.items():
        if k not in PLATFORM_KEYS:
            if isinstance(v, dict) and isinstance(resolved.get(k), dict):
                merged = resolved[k]
                for fk, fv in _flatten(v).items():
                    _set(merged, fk, fv)
            else:
                resolved[k] = copy.deepcopy(v)
    for o in overrides:
        key = o.key.strip()
        if not key or any(not part for part in key.split(".")):
            raise _bad(key, f"override {o.key!r}={o.value!r}: the key must be a dotted name like grpo.kl_coef")
        if key in PLATFORM_KEYS:
            raise _bad(key, f"-s {key}=...: {key} is a platform setting; use its command-line option instead")
        param: ParameterDecl | None
        if recipe.parameters:
            param = declared.get(key)
            if param is None and key in fw_keys:
                param = _framework_param(key, fw_keys[key])
            if param is None:
                raise _unknown_key(recipe, key, "-s", declared, fw, fw_keys)
        else:
            if key not in flat_config:
                hint = (
                    suggestion(key, list(flat_config))
                    if flat_config
                    else f"; add `{key}: <value>` to config.yaml to make it a setting -s can override"
                )
                raise _bad(key, f"-s {key}: config.yaml of this experiment has no key {key!r}{hint}")
            param = _infer(key, flat_config[key])
        _set(resolved, key, parse_value(param, o.value))
    json.dumps(resolved)  # must stay JSON-serialisable (it travels in capsule.json)
    return resolved
