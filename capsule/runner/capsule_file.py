"""Reading capsule.json (schema starforge.capsule/v1), already verified by bootstrap.sh."""

from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass, field
from typing import Any

SCHEMA = "starforge.capsule/v1"


@dataclass(frozen=True)
class RunSpec:
    """capsule.json ``run``: what to run and how the platform observes it."""

    method: str
    adapter: str
    experiment: str
    entrypoint: str
    config: dict[str, Any] = field(default_factory=dict)
    observability: str = "platform"
    model: str = ""
    train_data: str = ""
    validation_data: str = ""
    pools: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class CapsuleSpec:
    job_id: str
    attempt_id: str
    attempt_number: int
    runner: str
    run: RunSpec


def _str(doc: dict[str, Any], key: str, default: str | None = None) -> str:
    value = doc.get(key, default)
    if not isinstance(value, str):
        raise ValueError(f"capsule.json {key!r} must be a string, got {value!r}")
    return value


def parse_capsule(data: bytes) -> CapsuleSpec:
    """Parse capsule.json; ValueError with the offending key when it does not fit the schema."""
    doc = json.loads(data)
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ValueError(f"capsule.json is not {SCHEMA}")
    run = doc.get("run")
    if not isinstance(run, dict):
        raise ValueError("capsule.json has no 'run' object")
    config = run.get("config", {})
    if not isinstance(config, dict):
        raise ValueError("capsule.json run.config must be an object")
    pools = run.get("pools", [])
    if not isinstance(pools, list):
        raise ValueError("capsule.json run.pools must be a list")
    number = doc.get("attempt_number", 1)
    if isinstance(number, bool) or not isinstance(number, int):
        raise ValueError("capsule.json attempt_number must be an integer")
    return CapsuleSpec(
        job_id=_str(doc, "job_id"),
        attempt_id=_str(doc, "attempt_id"),
        attempt_number=number,
        runner=_str(doc, "runner"),
        run=RunSpec(
            method=_str(run, "method", ""),
            adapter=_str(run, "adapter"),
            experiment=_str(run, "experiment", ""),
            entrypoint=_str(run, "entrypoint", ""),
            config=config,
            observability=_str(run, "observability", "platform"),
            model=_str(run, "model", ""),
            train_data=_str(run, "train_data", ""),
            validation_data=_str(run, "validation_data", ""),
            pools=pools,
        ),
    )


def read_capsule(capsule_dir: pathlib.Path) -> CapsuleSpec:
    return parse_capsule((capsule_dir / "capsule.json").read_bytes())
