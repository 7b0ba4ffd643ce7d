"""The executor kinds' shared plumbing (executor_svc/plumbing): the one relative-path rule (and
fetch.py's copy of it for pods), the one pool check, attempt locks and records."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from starforge_api.job.v1 import job_spec_pb2 as spec_pb

from common import errors
from common.relpath import relative_path_problem
from executor_svc.kuberay import fetch
from executor_svc.kuberay.states import RAY_JOB_STATES
from executor_svc.local.executor import LOCAL_STATES
from executor_svc.plumbing.locks import AttemptLocks
from executor_svc.plumbing.paths import check_relative_path
from executor_svc.plumbing.pools import PoolRules, Shape, check_pools
from executor_svc.plumbing.records import JsonRecord
from executor_svc.plumbing.states import SUCCEEDED, look_up
from executor_svc.slurm.models import BASE_STATES
from executor_svc.slurm.states import SLURM_STATES

PATHS = {
    "a.txt": "",
    "dir/sub/a.txt": "",
    "": "is empty",
    "/etc/passwd": "is absolute",
    "a\\b": "contains a backslash or NUL",
    "a\x00b": "contains a backslash or NUL",
    "../x": "has an empty, '.' or '..' component",
    "a/../../x": "has an empty, '.' or '..' component",
    "a//b": "has an empty, '.' or '..' component",
    "./a": "has an empty, '.' or '..' component",
    "a/": "has an empty, '.' or '..' component",
    "x" * 256: "has a component longer than 255 bytes",
    "é" * 128: "has a component longer than 255 bytes",
}


@pytest.mark.parametrize("path", list(PATHS))
def test_relative_path_rule(path: str) -> None:
    assert relative_path_problem(path) == PATHS[path]
    if PATHS[path]:
        with pytest.raises(errors.InvalidArgument, match="paths must be relative") as refused:
            check_relative_path(path, "files[0].path")
        assert refused.value.field_violations[0].field == "files[0].path"
    else:
        assert check_relative_path(path, "f") == tuple(path.split("/"))


@pytest.mark.parametrize("path", list(PATHS))
def test_the_pods_fetch_script_applies_the_same_rule(path: str, tmp_path: Path) -> None:
    roots = {"workspace": str(tmp_path)}
    if PATHS[path]:
        with pytest.raises(fetch.FetchError) as refused:
            fetch.destination(roots, "workspace", path)
        assert refused.value.code == fetch.INTEGRITY
    else:
        assert fetch.destination(roots, "workspace", path) == str(tmp_path.joinpath(*path.split("/")))


SINGLE = PoolRules(kind="local", place="on this node")
MULTI = PoolRules(kind="slurm", place="in this Slurm fleet", multi_pool=True, multi_node=True)
INVENTORY = {"h200": Shape(nodes=2, gpus_per_node=8), "cpu": Shape(nodes=1, gpus_per_node=0)}


def pool(series: str = "h200", nodes: int = 1, gpus: int = 8, name: str = "main") -> spec_pb.Pool:
    return spec_pb.Pool(name=name, series=series, nodes=nodes, gpus_per_node=gpus)


@pytest.mark.parametrize(
    ("rules", "pools", "message", "field"),
    [
        (SINGLE, [], "no pools", "pools"),
        (SINGLE, [pool(), pool(name="b")], "runs single-pool jobs; this one has 2 pools", "pools"),
        (SINGLE, [pool("b200")], r"series 'b200' is not on this node \(h200, cpu\)", "pools[0].series"),
        (SINGLE, [pool(nodes=2)], "the local executor places one node per job", "pools[0].nodes"),
        (SINGLE, [pool(gpus=9)], "asks for 9 h200 GPUs per node; this node has 8", "pools[0].gpus_per_node"),
        (SINGLE, [pool(gpus=-1)], "must not be negative", "pools[0].gpus_per_node"),
        (MULTI, [pool(), pool("a100", name="b")], "series 'a100' is not in this Slurm fleet", "pools[1].series"),
        (MULTI, [pool(nodes=3)], "asks for 3 h200 nodes; this fleet has 2", "pools[0].nodes"),
        (MULTI, [pool(gpus=9)], "its nodes have 8", "pools[0].gpus_per_node"),
        (MULTI, [pool("cpu", gpus=1)], "asks for 1 cpu GPUs per node", "pools[0].gpus_per_node"),
    ],
)
def test_pools_a_kind_can_never_run(rules: PoolRules, pools: list[spec_pb.Pool], message: str, field: str) -> None:
    with pytest.raises(errors.InvalidArgument, match=message) as refused:
        check_pools(pools, rules, INVENTORY)
    assert [v.field for v in refused.value.field_violations] == [field]


def test_pools_a_kind_can_run() -> None:
    two = [pool(nodes=2), pool("cpu", nodes=0, gpus=0, name="rollout")]
    assert check_pools(two, MULTI, INVENTORY) == two
    assert check_pools([pool("anything", gpus=4)], SINGLE) == [pool("anything", gpus=4)]  # no inventory: agent


async def test_attempt_locks_serialise_one_attempt_and_mark_launches() -> None:
    locks = AttemptLocks()
    assert locks.lock("j1.1") is locks.lock("j1.1")
    assert locks.lock("j1.1") is not locks.lock("j1.2")
    order: list[str] = []

    async def hold(tag: str) -> None:
        async with locks.lock("j1.1"):
            order.append(f"{tag} in")
            await asyncio.sleep(0)
            order.append(f"{tag} out")

    await asyncio.gather(hold("a"), hold("b"))
    assert order == ["a in", "a out", "b in", "b out"]
    seen: list[bool] = []

    def failing_launch() -> None:
        with locks.launching_now("j1.1"):
            seen.append("j1.1" in locks.launching)
            raise RuntimeError("launch failed")

    with pytest.raises(RuntimeError):
        failing_launch()
    assert seen == [True]
    assert "j1.1" not in locks.launching


@dataclasses.dataclass
class Record(JsonRecord):
    attempt_id: str
    slurm_job_id: int = 0


def test_records_round_trip_and_tolerate_junk(tmp_path: Path) -> None:
    path = tmp_path / "a" / "attempt.json"
    assert Record.load(path) is None
    Record("j1.1", 7).save(path)
    assert Record.load(path) == Record("j1.1", 7)
    assert not list(path.parent.glob(".*.tmp"))
    path.write_text('{"attempt_id": "j1.1", "slurm_job_id": 7, "written_by_a_newer_executor": 1}')
    assert Record.load(path) == Record("j1.1", 7)
    for junk in ("{", "[]", '{"slurm_job_id": 7}'):
        path.write_text(junk)
        assert Record.load(path) is None


def test_every_slurm_base_state_has_a_row_and_unknown_keys_are_errors() -> None:
    assert set(SLURM_STATES) == BASE_STATES
    assert set(RAY_JOB_STATES) == {"SUCCEEDED", "STOPPED", "FAILED"}
    assert look_up(LOCAL_STATES, "exited 0", "phase") == SUCCEEDED
    with pytest.raises(ValueError, match="unknown local runtime phase 'zombie'"):
        look_up(LOCAL_STATES, "zombie", "local runtime phase")
