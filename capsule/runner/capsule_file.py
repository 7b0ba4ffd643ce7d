"""Reading capsule.json (schema starforge.capsule/v2), already verified by bootstrap.sh.

capsule.json is the contract's ``starforge.executor.v1.CapsuleManifest`` in protobuf's JSON mapping;
it is parsed here with the generated pure-Python code (sfpb), so the runner reads exactly what the
control plane's capsule/layout.py writes. RunSpec is the adapters' view of ``run``: the config as a
dict, the pools as dicts, the stage as a word.
"""

from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass, field
from typing import Any

from sfpb.starforge.executor import v1 as executor

SCHEMA = "starforge.capsule/v2"
TRAIN, EXPORT, EVAL = "train", "export", "eval"
STAGES = {
    executor.CapsuleStage.UNSPECIFIED: TRAIN,
    executor.CapsuleStage.TRAIN: TRAIN,
    executor.CapsuleStage.EXPORT: EXPORT,
    executor.CapsuleStage.EVAL: EVAL,
}


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
    # Pipeline stage: "train", "export" or "eval".
    stage: str = TRAIN
    observability_url: str = ""
    observability_tool: str = ""
    runtime_id: str = ""
    runtime_python: str = ""
    runtime_capabilities: tuple[str, ...] = ()


@dataclass(frozen=True)
class CapsuleSpec:
    job_id: str
    attempt_id: str
    attempt_number: int
    runner: str
    run: RunSpec


def _config(text: str) -> dict[str, Any]:
    config = json.loads(text or "{}")
    if not isinstance(config, dict):
        raise ValueError("capsule.json run.config_json must be a JSON object")
    return config


def _run_spec(run: executor.CapsuleRun) -> RunSpec:
    if not run.adapter:
        raise ValueError("capsule.json run.adapter is empty")
    return RunSpec(
        method=run.method,
        adapter=run.adapter,
        experiment=run.experiment,
        entrypoint=run.entrypoint,
        config=_config(run.config_json),
        observability=run.observability or "platform",
        model=run.model,
        train_data=run.train_data,
        validation_data=run.validation_data,
        pools=[
            {"name": p.name, "series": p.series, "nodes": p.nodes, "gpus_per_node": p.gpus_per_node} for p in run.pools
        ],
        stage=STAGES.get(run.stage, TRAIN),
        observability_url=run.observability_url,
        observability_tool=run.observability_tool,
        runtime_id=run.runtime_id,
        runtime_python=run.runtime_python,
        runtime_capabilities=tuple(run.runtime_capabilities),
    )


def parse_capsule(data: bytes) -> CapsuleSpec:
    """Parse capsule.json; ValueError saying what does not fit the schema."""
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise ValueError(f"capsule.json is not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        found = doc.get("schema") if isinstance(doc, dict) else None
        raise ValueError(f"capsule.json is not {SCHEMA} (found {found!r}): the runner and the control plane differ")
    try:
        manifest = executor.CapsuleManifest.from_dict(doc)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise ValueError(f"capsule.json does not fit {SCHEMA}: {exc}") from None
    if manifest.run is None:
        raise ValueError("capsule.json has no 'run' object")
    return CapsuleSpec(
        job_id=manifest.job_id,
        attempt_id=manifest.attempt_id,
        attempt_number=manifest.attempt_number or 1,
        runner=manifest.runner,
        run=_run_spec(manifest.run),
    )


def read_capsule(capsule_dir: pathlib.Path) -> CapsuleSpec:
    return parse_capsule((capsule_dir / "capsule.json").read_bytes())
