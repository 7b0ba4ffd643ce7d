"""The RayJob the builder makes survives KubeRay's real CRD schema field for field.

The API server prunes every field the CRD schema does not declare (and the executor creates with
fieldValidation=Strict, so it would refuse instead). Reading the object back and finding every
field the builder set proves the manifest fits KubeRay's schema. Server-added fields (status,
uid, resourceVersion, defaults such as the head group's defaults) are ignored: the comparison
walks the manifest, not the read-back object.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from common import errors
from executor_svc.kuberay import builder
from executor_svc.kuberay.config import KubeRayConfig
from executor_svc.kuberay.executor import KubeRayExecutor
from tests.unit.kuberay.requests import pool, request

from .conftest import Operator

pytestmark = pytest.mark.kube


def missing_fields(want: Any, got: Any, path: str = "") -> list[str]:
    """Paths of `want` that `got` lacks or holds with another value (lists element by element)."""
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [f"{path}: expected an object, got {got!r}"[:300]]
        out: list[str] = []
        for k, v in want.items():
            if k not in got:
                out.append(f"{path}.{k}: pruned")
            else:
                out += missing_fields(v, got[k], f"{path}.{k}")
        return out
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return [f"{path}: expected {len(want)} items, got {got!r}"[:300]]
        return [m for i, (w, g) in enumerate(zip(want, got, strict=True)) for m in missing_fields(w, g, f"{path}[{i}]")]
    return [] if want == got else [f"{path}: sent {want!r}, read back {got!r}"[:300]]


CASES = {
    "cpu": [pool("cpu")],
    "h200x16": [pool("h200", 8, nodes=2)],
    "multi-pool": [pool("h200", 8, name="train"), pool("h100", 2, name="rollout")],
}


@pytest.mark.parametrize("case", list(CASES))
async def test_read_back_keeps_every_field(
    case: str, executor: KubeRayExecutor, kube_config: KubeRayConfig, operator: Operator
) -> None:
    req = request(CASES[case])
    ds = req.datasets.add(name="train", ref="tester/train@1")
    ds.manifest.files.add(path="a.jsonl", sha256="b" * 64, size=3)
    built = builder.build(req, kube_config)
    result = await executor.launch(req)
    assert result.backend_handle == f"{kube_config.namespace}/{built.name}"
    back = operator.get(built.name)
    assert back is not None
    assert missing_fields(built.manifest, back) == []
    assert back["metadata"]["uid"]  # really the server's object, with server-added fields
    spec = back["spec"]["rayClusterSpec"]
    expected_workers = {"cpu": [], "h200x16": [("main", 1)], "multi-pool": [("rollout", 1)]}[case]
    assert [(w["groupName"], w["replicas"]) for w in spec.get("workerGroupSpecs", [])] == expected_workers


async def test_unknown_fields_are_refused_with_their_paths(
    executor: KubeRayExecutor, kube_config: KubeRayConfig, operator: Operator
) -> None:
    manifest = copy.deepcopy(builder.build(request(), kube_config).manifest)
    manifest["spec"]["retries"] = 3
    manifest["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["gpus"] = 1
    with pytest.raises(errors.InvalidArgument) as info:
        executor.kube.create_rayjob(manifest)
    fields = sorted(v.field for v in info.value.field_violations)
    assert fields == ["spec.rayClusterSpec.headGroupSpec.template.spec.containers[0].gpus", "spec.retries"]
    assert operator.names() == []


async def test_schema_violations_are_invalid_argument_with_field_paths(
    executor: KubeRayExecutor, kube_config: KubeRayConfig
) -> None:
    manifest = copy.deepcopy(builder.build(request(), kube_config).manifest)
    manifest["spec"]["ttlSecondsAfterFinished"] = "soon"
    manifest["spec"]["preRunningDeadlineSeconds"] = 0  # the CRD says minimum 1
    with pytest.raises(errors.InvalidArgument) as info:
        executor.kube.create_rayjob(manifest)
    fields = {v.field for v in info.value.field_violations}
    assert {"spec.ttlSecondsAfterFinished", "spec.preRunningDeadlineSeconds"} <= fields
    assert "refused the object" in info.value.message
