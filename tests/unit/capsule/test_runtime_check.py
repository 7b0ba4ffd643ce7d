"""The runner's runtime check: Python version and declared capabilities."""

from __future__ import annotations

import pytest

from capsule.runner.capsule_file import RunSpec
from capsule.runner.errors import PrecheckError
from capsule.runner.runtime_check import check_capabilities, check_python

CPU = [{"name": "main", "series": "cpu", "nodes": 1, "gpus_per_node": 0}]
GPU = [{"name": "train", "series": "h100", "nodes": 1, "gpus_per_node": 8}]


def run(**kw: object) -> RunSpec:
    base: dict[str, object] = {"method": "verl/grpo", "adapter": "verl", "experiment": "e", "entrypoint": "x"}
    base.update(kw)
    return RunSpec(**base)  # type: ignore[arg-type]


def test_python_older_than_declared_is_refused_with_a_hint() -> None:
    spec = run(runtime_id="verl-0.7", runtime_python="3.12")
    check_python(spec, (3, 12, 0))
    check_python(spec, (3, 13, 1))
    check_python(run(), (3, 8, 0))  # nothing declared: nothing checked
    with pytest.raises(PrecheckError) as err:
        check_python(spec, (3, 11, 7))
    assert (
        str(err.value) == "this image runs Python 3.11.7, but runtime verl-0.7 of verl/grpo needs Python 3.12 or newer"
    )
    assert "sf recipe show verl/grpo" in err.value.hint


def test_capabilities_a_run_needs_must_be_declared() -> None:
    rollout = {"actor_rollout_ref": {"rollout": {"name": "sglang"}}}
    check_capabilities(run(pools=GPU, config=rollout, runtime_capabilities=("ray", "sglang")), {})
    check_capabilities(run(pools=CPU), {})  # none declared (custom images): nothing checked
    with pytest.raises(PrecheckError, match=r"sglang \(actor_rollout_ref.rollout.name is sglang\)") as err:
        check_capabilities(run(pools=GPU, config=rollout, runtime_id="verl-0.7", runtime_capabilities=("vllm",)), {})
    assert "runtime verl-0.7 does not declare" in str(err.value) and err.value.hint
    with pytest.raises(PrecheckError, match=r"cpu \(it runs on CPU-only machines"):
        check_capabilities(run(pools=CPU, runtime_capabilities=("ray",)), {})
    with pytest.raises(PrecheckError, match="multi_pool"):
        check_capabilities(run(pools=GPU + GPU, runtime_capabilities=("ray",)), {})


def test_the_image_declaration_replaces_the_runtime_one() -> None:
    spec = run(pools=CPU, runtime_capabilities=("cpu",))
    check_capabilities(spec, {"STARFORGE_IMAGE_CAPABILITIES": "cpu, vllm"})
    with pytest.raises(PrecheckError, match=r"the image \(STARFORGE_IMAGE_CAPABILITIES\) does not declare"):
        check_capabilities(spec, {"STARFORGE_IMAGE_CAPABILITIES": ""})
