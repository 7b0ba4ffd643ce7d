"""Pure control-plane rules: state machine, profiles, overrides, placement, diagnosis, config."""

from __future__ import annotations

import itertools
import pathlib

import pytest
from starforge_api.job.v1 import job_spec_pb2
from starforge_api.job.v1 import job_state_pb2 as st

from common import errors, profiles
from common.config import ConfigError, load_config
from control import config as control_config
from control import diagnosis
from control.ledger import state_machine as sm
from control.scheduler import placement
from recipes import params as overrides
from recipes.catalog import ParameterDecl, RecipeDecl, RuntimeDecl

ALL = [sm.QUEUED, sm.SUBMITTED, sm.PENDING, sm.RUNNING, sm.SUCCEEDED, sm.FAILED, sm.STOPPED, sm.PAUSED]
DESIGN = {
    (sm.QUEUED, sm.SUBMITTED),
    (sm.SUBMITTED, sm.PENDING),
    (sm.PENDING, sm.RUNNING),
    (sm.RUNNING, sm.SUCCEEDED),
    (sm.RUNNING, sm.FAILED),
    (sm.RUNNING, sm.STOPPED),
    (sm.RUNNING, sm.PAUSED),
    (sm.PAUSED, sm.QUEUED),
    (sm.FAILED, sm.QUEUED),
    (sm.STOPPED, sm.QUEUED),
}
EARLY_END = {(a, b) for a in (sm.QUEUED, sm.SUBMITTED, sm.PENDING) for b in (sm.STOPPED, sm.FAILED)} | {
    (sm.SUBMITTED, sm.PAUSED),
    (sm.PENDING, sm.PAUSED),
    (sm.PAUSED, sm.STOPPED),
}


@pytest.mark.parametrize(("a", "b"), list(itertools.product(ALL, ALL)))
def test_state_machine_is_exactly_the_design(a: int, b: int) -> None:
    if (a, b) in DESIGN | EARLY_END:
        sm.check(a, b)
    else:
        with pytest.raises(errors.FailedPrecondition):
            sm.check(a, b)


def test_succeeded_is_final() -> None:
    assert not sm.LEGAL[sm.SUCCEEDED]


def test_path_goes_through_running() -> None:
    assert sm.path_to(sm.SUBMITTED, sm.SUCCEEDED) == [sm.PENDING, sm.RUNNING, sm.SUCCEEDED]
    assert sm.path_to(sm.PENDING, sm.FAILED) == [sm.FAILED]


def test_path_never_invents_a_state() -> None:
    # a job paused while its launch was refused never ran: no RUNNING on its way to PAUSED
    assert sm.path_to(sm.SUBMITTED, sm.PAUSED) == [sm.PAUSED]
    assert sm.path_to(sm.SUBMITTED, sm.STOPPED) == [sm.STOPPED]
    # a resting job moves by one legal edge; an observation never implies a requeue
    assert sm.path_to(sm.FAILED, sm.QUEUED) == [sm.QUEUED]
    with pytest.raises(errors.FailedPrecondition):
        sm.path_to(sm.FAILED, sm.RUNNING)
    with pytest.raises(errors.FailedPrecondition):
        sm.path_to(sm.QUEUED, sm.RUNNING)


@pytest.mark.parametrize(("a", "b"), list(itertools.product(ALL, ALL)))
def test_every_path_is_legal_and_shortest(a: int, b: int) -> None:
    try:
        path = sm.path_to(a, b)
    except errors.FailedPrecondition:
        return
    steps = list(zip([a, *path], path, strict=False))
    for x, y in steps:
        sm.check(x, y)
    assert all(x in sm.ACTIVE for x in path[:-1])
    assert len(path) <= 3


def test_desired_requests() -> None:
    sm.check_request(sm.NO_REQUEST, sm.STOP)
    sm.check_request(sm.NO_REQUEST, sm.PAUSE)
    sm.check_request(sm.PAUSE, sm.STOP)
    with pytest.raises(errors.FailedPrecondition, match="being asked to stop"):
        sm.check_request(sm.STOP, sm.PAUSE)


REG = control_config.DEFAULT_PROFILES


@pytest.mark.parametrize(
    ("text", "nodes", "per_node"),
    [("h200", 1, 8), ("h200:4", 1, 4), ("h200:8", 1, 8), ("h200:16", 2, 8), ("h100:2", 1, 2), ("cpu", 1, 0)],
)
def test_profiles_resolve(text: str, nodes: int, per_node: int) -> None:
    p = profiles.resolve_one("main", text, REG)
    assert (p.nodes, p.gpus_per_node) == (nodes, per_node)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("h200:12", "12 GPUs do not fill whole h200 nodes (8 per node); valid: h200:{1,2,4,8,16,32}"),
        ("b300:8", "unknown GPU series 'b300' in profile 'b300:8'; known series: a100, cpu, h100, h200, l40s"),
        ("h200:0", "ask for at least 1 GPU"),
        ("h200:x", "profile 'h200:x' is not valid"),
        ("cpu:4", "cpu has no GPUs"),
    ],
)
def test_bad_profiles_say_what_is_valid(text: str, message: str) -> None:
    with pytest.raises(errors.InvalidArgument) as e:
        profiles.resolve_one("main", text, REG)
    assert message in e.value.message


def test_several_pools_must_be_named() -> None:
    with pytest.raises(errors.InvalidArgument, match="name each pool"):
        profiles.resolve(
            [job_spec_pb2.PoolRequest(profile="h200:8"), job_spec_pb2.PoolRequest(profile="h100:2")], REG, ""
        )
    pools = profiles.resolve(
        [
            job_spec_pb2.PoolRequest(name="train", profile="h200:8"),
            job_spec_pb2.PoolRequest(name="rollout", profile="h100:2"),
        ],
        REG,
        "",
    )
    assert [(p.name, p.series, p.gpus_per_node) for p in pools] == [("train", "h200", 8), ("rollout", "h100", 2)]


GRPO = RecipeDecl(
    name="verl/grpo",
    framework="verl",
    version="1.0.0",
    description="",
    adapter="verl",
    entrypoint="verl.trainer.main_ppo",
    runtimes=[RuntimeDecl("0.5.0", "verl-0.5", default=True)],
    parameters=[
        ParameterDecl("grpo.kl_coef", "float", 0.001, min=0.0, max=10.0),
        ParameterDecl("policy.optimizer.kwargs.lr", "float", 1e-6, min=0.0, max=1.0),
        ParameterDecl("rollout.n", "int", 8, min=1, max=64),
        ParameterDecl("rollout.engine", "string", "vllm", choices=["vllm", "sglang"]),
    ],
)


def _ov(*pairs: tuple[str, str]) -> list[job_spec_pb2.Override]:
    return [job_spec_pb2.Override(key=k, value=v) for k, v in pairs]


def test_overrides_are_typed_and_nested() -> None:
    cfg = overrides.resolve_config(GRPO, {}, _ov(("policy.optimizer.kwargs.lr", "1e-6"), ("grpo.kl_coef", "0.05")))
    assert cfg["grpo"]["kl_coef"] == 0.05
    assert cfg["policy"]["optimizer"]["kwargs"]["lr"] == 1e-6
    assert cfg["rollout"] == {"n": 8, "engine": "vllm"}


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        (
            ("grpo.kl_coeff", "0.1"),
            "-s grpo.kl_coeff: verl/grpo has no parameter 'grpo.kl_coeff'; did you mean grpo.kl_coef?",
        ),
        (("grpo.kl_coef", "abc"), "-s grpo.kl_coef=abc: expected a float"),
        (("grpo.kl_coef", "11"), "11.0 is above the maximum 10 for grpo.kl_coef"),
        (("rollout.n", "1.5"), "-s rollout.n=1.5: expected an int"),
        (("rollout.engine", "hf"), "'hf' is not one of vllm, sglang"),
        (("image", "x"), "image is a platform setting"),
    ],
)
def test_bad_overrides_fail_at_once(pair: tuple[str, str], message: str) -> None:
    with pytest.raises(errors.InvalidArgument) as e:
        overrides.resolve_config(GRPO, {}, _ov(pair))
    assert message in e.value.message


def test_custom_overrides_follow_config_types() -> None:
    custom = RecipeDecl("custom/custom", "custom", "1", "", "custom", "x", [RuntimeDecl("1", "custom", default=True)])
    cfg = overrides.resolve_config(custom, {"lr": 0.1, "steps": 10, "image": "host"}, _ov(("steps", "20")))
    assert cfg == {"lr": 0.1, "steps": 20}
    with pytest.raises(errors.InvalidArgument, match="has no key 'step'; did you mean steps"):
        overrides.resolve_config(custom, {"steps": 10}, _ov(("step", "2")))


def test_placement_backfills_and_explains() -> None:
    fleets = [placement.FleetCapacity("gpu", {"h200": 8}, {"h200": 1})]
    cands = [
        placement.Candidate("big", "a", "p", 0, 1, {"h200": 16}, nodes={"h200": 2}),
        placement.Candidate("j1", "a", "p", 0, 2, {"h200": 6}),
        placement.Candidate("j2", "a", "p", 0, 3, {"h200": 4}),
        placement.Candidate("j3", "a", "p", 0, 4, {"h200": 2}),
    ]
    d = placement.decide(cands, fleets)
    assert d.placed == [("j1", "gpu"), ("j3", "gpu")]
    assert d.waiting["j2"][0] == st.WAIT_REASON_CAPACITY
    assert "fleet gpu has 2 free h200 of the 4 needed" in d.waiting["j2"][1]
    assert "no fleet has the machines" in d.waiting["big"][1]


def test_diagnosis_integrity_failure_is_a_precheck() -> None:
    d = diagnosis.diagnose(
        exit_code=97,
        log_tail=["starforge: capsule integrity check failed: workspace/train.sh: expected sha256 aa, found bb"],
    )
    assert d.failure_class == st.FAILURE_CLASS_PRECHECK
    assert d.summary == "capsule integrity check failed: workspace/train.sh: expected sha256 aa, found bb"
    assert not d.retryable


def test_config_rejects_unknown_keys_with_suggestion(tmp_path: pathlib.Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("lisen: 1.2.3.4:5\n")
    with pytest.raises(ConfigError, match="unknown key 'lisen'; did you mean listen"):
        load_config(control_config.ControlConfig, p, {})


def test_config_env_overrides_file(tmp_path: pathlib.Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("listen: 127.0.0.1:1\nfleets:\n  - {name: a, kind: local, address: 127.0.0.1:2}\n")
    cfg = control_config.load(p, {"STARFORGE_LISTEN": "127.0.0.1:9", "STARFORGE_SCHEDULER_INTERVAL_SECONDS": "2"})
    assert cfg.listen == "127.0.0.1:9"
    assert cfg.scheduler_interval_seconds == 2.0
    assert cfg.fleets[0].kind == "local"


def test_config_refuses_unknown_fleet_kind(tmp_path: pathlib.Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("fleets:\n  - {name: a, kind: k8s, address: 127.0.0.1:2}\n")
    with pytest.raises(ConfigError, match="unknown executor kind 'k8s'; valid kinds: local, agent, kuberay, slurm"):
        control_config.load(p, {})


def test_dispatch_only_stops_when_capacity_runs_out() -> None:
    cands = [placement.Candidate(f"j{i}", f"u{i}", "@p/x", 0, i, {"h200": 8}) for i in range(100)]
    full = placement.decide(cands, [placement.FleetCapacity("gpu", {"h200": 16}, {"h200": 2})])
    fast = placement.decide(cands, [placement.FleetCapacity("gpu", {"h200": 16}, {"h200": 2})], dispatch_only=True)
    assert fast.placed == full.placed == [("j0", "gpu"), ("j1", "gpu")]
    assert len(full.waiting) == 98 and fast.waiting == {} and not fast.backfill
    none_free = placement.decide(cands, [placement.FleetCapacity("gpu", {"h200": 0}, {"h200": 2})], dispatch_only=True)
    assert none_free.placed == [] and none_free.waiting == {}


def test_backfill_is_flagged_when_a_job_waits_beside_free_capacity() -> None:
    cands = [
        placement.Candidate("big", "u1", "@p/x", 0, 1, {"h200": 16}),
        placement.Candidate("small", "u2", "@p/x", 0, 2, {"h200": 4}),
    ]
    d = placement.decide(cands[:1], [placement.FleetCapacity("gpu", {"h200": 8}, {"h200": 1})], dispatch_only=True)
    assert d.placed == [] and d.backfill
    d = placement.decide(cands, [placement.FleetCapacity("gpu", {"h200": 8}, {"h200": 1})])
    assert d.placed == [("small", "gpu")] and d.backfill  # 4 GPUs still free while "big" waits


def test_missing_untracked_names_only_a_file_an_error_line_names() -> None:
    untracked = ["notes.txt", "experiments/exp/prep.py", "experiments/exp/helpers/__init__.py"]
    line = "python3: can't open file '/ws/experiments/exp/prep.py': [Errno 2] No such file or directory"
    assert diagnosis.missing_untracked(["starting", line], untracked) == "experiments/exp/prep.py"
    assert (
        diagnosis.missing_untracked(["bash: ./prep.py: No such file or directory"], untracked)
        == "experiments/exp/prep.py"
    )
    assert diagnosis.missing_untracked(["FileNotFoundError: data/train.parquet"], untracked) == ""
    assert diagnosis.missing_untracked(["prep.py ran fine"], untracked) == ""
    assert diagnosis.untracked_module("helpers", untracked) == "experiments/exp/helpers/__init__.py"
    assert diagnosis.untracked_module("numpy", untracked) == ""


def test_fleet_queues_serve_and_names_are_checked(tmp_path: pathlib.Path) -> None:
    night = control_config.FleetConfig("n", "local", "127.0.0.1:1", queues=["night"])
    plain = control_config.FleetConfig("p", "local", "127.0.0.1:2")
    assert night.serves("night") and not night.serves("") and not night.serves("default")
    assert plain.serves("") and plain.serves("default") and not plain.serves("night")
    assert control_config.ControlConfig(fleets=[night, plain]).queue_names() == ["default", "night"]
    p = tmp_path / "c.yaml"
    p.write_text("fleets:\n  - {name: a, kind: local, address: '127.0.0.1:1', queues: ['Bad Queue']}\n")
    with pytest.raises(ConfigError, match=r"fleets\.a\.queues: 'Bad Queue' is not a queue name"):
        control_config.load(p, {})
