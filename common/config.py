"""Configuration: one frozen dataclass per component, loaded defaults -> file -> environment.

    cfg = load_config(ControlConfig, path, os.environ)

The file is YAML. Environment variables `STARFORGE_<FIELD>` override top-level fields and
`STARFORGE_<FIELD>__<SUB>` nested ones (values are YAML scalars, so "8" is an int and "true" a
bool). Unknown keys are refused with the nearest valid names; types are checked. The environment
is a parameter so tests never touch os.environ.
"""

from __future__ import annotations

import dataclasses
import difflib
import pathlib
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

import yaml

T = TypeVar("T")
ENV_PREFIX = "STARFORGE_"


class ConfigError(ValueError):
    """A configuration file or variable is wrong; the message says where and how."""


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, where)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if errors else f"{where}: bad value {value!r}")
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
        return build_dataclass(tp, value, where)
    if origin in (list, tuple) or tp in (list, tuple):
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}: expected a list, got {type(value).__name__}")
        item_tp = args[0] if args else Any
        items = [_coerce(v, item_tp, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if (origin is tuple or tp is tuple) else items
    if origin is dict or tp is dict or origin is Mapping:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
        key_tp, val_tp = args if args else (Any, Any)
        return {_coerce(k, key_tp, f"{where}.{k}"): _coerce(v, val_tp, f"{where}.{k}") for k, v in value.items()}
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return str(value)
    if tp is pathlib.Path:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a path, got {value!r}")
        return pathlib.Path(value).expanduser()
    raise ConfigError(f"{where}: unsupported type {_type_name(tp)}")


def build_dataclass(cls: type[T], data: Mapping[str, Any], where: str) -> T:
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = [k for k in data if k not in fields]
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(str(key), fields, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else f"; valid keys: {', '.join(sorted(fields))}"
        raise ConfigError(f"{where}: unknown key {key!r}{hint}")
    kwargs = {}
    for name, value in data.items():
        kwargs[name] = _coerce(value, hints[name], f"{where}.{name}" if where else name)
    missing = [
        n
        for n, f in fields.items()
        if n not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ConfigError(f"{where or 'config'}: missing required key {missing[0]!r}")
    return cls(**kwargs)


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _merge(dict(out[k]), v)
        else:
            out[k] = v
    return out


def _env_overrides(env: Mapping[str, str], prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, raw in env.items():
        if not key.startswith(prefix):
            continue
        path = key[len(prefix) :].lower().split("__")
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            value = raw
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return out


def load_config(
    cls: type[T],
    path: pathlib.Path | str | None,
    env: Mapping[str, str],
    *,
    prefix: str = ENV_PREFIX,
    env_keys: typing.Collection[str] | None = None,
) -> T:
    """Build `cls` from its defaults, then the YAML file at `path`, then `env`.

    Only environment variables naming a field of `cls` (top-level, or `env_keys` when given) are
    used, so unrelated STARFORGE_* variables of other components are ignored.
    """
    data: dict[str, Any] = {}
    if path is not None:
        p = pathlib.Path(path)
        try:
            text = p.read_text()
        except OSError as e:
            raise ConfigError(f"cannot read config file {p}: {e.strerror}") from None
        try:
            loaded = yaml.safe_load(text) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{p}: not valid YAML: {e}") from None
        if not isinstance(loaded, Mapping):
            raise ConfigError(f"{p}: expected a mapping at the top level")
        data = dict(loaded)
    names = set(env_keys) if env_keys is not None else {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    overrides = {k: v for k, v in _env_overrides(env, prefix).items() if k in names}
    data = _merge(data, overrides)
    return build_dataclass(cls, data, "")
