"""The documented `sf submit` command lines, run as written with the real `sf` against a console whose GPU fleet
is a real KubeRay executor on the Kubernetes API server. No GPU runs here, so each test checks what
the job becomes: the admitted job, its capsule.json (config + overrides as the runner sees them)
and the backend spec (the RayJob object the executor created)."""

from __future__ import annotations

import json
import pathlib
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
import yaml
from kubernetes import client
from starforge_api.control.v1 import account_service_pb2 as acc
from starforge_api.control.v1 import account_service_pb2_grpc as acc_grpc
from starforge_api.job.v1 import job_pb2
from starforge_api.job.v1 import job_state_pb2 as st

from control.config import InventoryConfig
from executor_svc.kuberay.names import rayjob_name
from tests.hub_server import HubRepos, hub_server
from tests.integration.backends.kube import Kube
from tests.integration.console import Console, console

pytestmark = pytest.mark.kube
ALLOW = ["registry.starforge.dev/", "nvcr.io/nvidia/", "myregistry.io/"]


@pytest.fixture
async def gpu_console(tmp_path: pathlib.Path, kube: Kube) -> AsyncIterator[Console]:
    namespace = f"seed-{tmp_path.name[-20:].lower().replace('_', '-').strip('-')}"
    inventory = [
        {"series": "h200", "nodes": 2, "gpus_per_node": 8},
        {"series": "h100", "nodes": 2, "gpus_per_node": 8},
        {"series": "cpu", "nodes": 4},
    ]
    with hub_server(HubRepos(public={"Qwen/Qwen3.5-9B"})) as hub:
        async with console(
            tmp_path,
            kind="kuberay",
            local={"kubeconfig": str(kube.kubeconfig), "namespace": namespace, "inventory": inventory},
            inventory=[
                InventoryConfig("h200", 2, 8),
                InventoryConfig("h100", 2, 8),
                InventoryConfig("cpu", 4, 0),
            ],
            image_allowlist=ALLOW,
            hf_endpoint=hub,
            http_listen="127.0.0.1:0",
        ) as c:
            c.extra["namespace"] = namespace
            c.extra["kube"] = kube
            yield c


async def _submit(c: Console, lab: pathlib.Path, *args: str) -> job_pb2.Job:
    r = await c.sf_async("-o", "json", "submit", *args, cwd=lab)
    data = json.loads(r.stdout)
    job = await c.get((data.get("job") or data)["job_id"])
    assert job.state in (st.JOB_STATE_QUEUED, st.JOB_STATE_SUBMITTED, st.JOB_STATE_PENDING), (
        job.diagnosis,
        job.attempts,
    )
    return job


async def _dispatched(c: Console, job: job_pb2.Job) -> tuple[dict[str, Any], dict[str, Any]]:
    """(capsule.json, RayJob) of the job's first attempt, once the executor created it."""
    job = await c.wait(job.job_id, st.JOB_STATE_PENDING, timeout=60)
    attempt = job.attempts[0]
    capsule = json.loads(c.app.ctx.store.read_bytes(attempt.capsule_digest))
    api = client.CustomObjectsApi(c.extra["kube"].api)
    rayjob = api.get_namespaced_custom_object(
        "ray.io", "v1", c.extra["namespace"], "rayjobs", rayjob_name(attempt.attempt_id)
    )
    return capsule, cast(dict[str, Any], rayjob)


def _gpus(container: dict[str, Any]) -> int:
    return int(container["resources"]["limits"].get("nvidia.com/gpu", 0))


async def test_grpo_on_h200_8(gpu_console: Console) -> None:
    c = gpu_console
    lab = await c.lab(
        "my-grpo",
        method="verl/grpo",
        config={"model": "Qwen/Qwen3.5-9B", "data": {"train": "data/train.parquet", "validation": "data/val.parquet"}},
        files={"data/train.parquet": "x", "data/val.parquet": "y"},
    )
    job = await _submit(c, lab, "my-grpo", "--profile", "h200:8")
    assert [(p.name, p.series, p.nodes, p.gpus_per_node) for p in job.pools] == [("main", "h200", 1, 8)]
    capsule, rayjob = await _dispatched(c, job)
    assert capsule["run"]["method"] == "verl/grpo"
    assert capsule["run"]["model"] == "Qwen/Qwen3.5-9B"
    assert capsule["run"]["train_data"] == "data/train.parquet"
    head = rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert _gpus(head) == 8
    assert rayjob["spec"]["entrypoint"] == "sh /forge/capsule/bootstrap.sh"
    assert head["image"].startswith("registry.starforge.dev/runtimes/verl:")


async def test_nemo_rl_overrides(gpu_console: Console) -> None:
    c = gpu_console
    lab = await c.lab("my-exp", method="nemo-rl/grpo")
    job = await _submit(c, lab, "my-exp", "-s", "policy.optimizer.kwargs.lr=1e-6", "-s", "grpo.kl_coef=0.05")
    config = json.loads(job.resolved_config_json)
    assert config["policy"]["optimizer"]["kwargs"]["lr"] == 1e-6
    assert config["grpo"]["kl_coef"] == 0.05
    capsule, _ = await _dispatched(c, job)
    assert json.loads(capsule["run"]["config_json"])["grpo"]["kl_coef"] == 0.05
    # overrides change only this submission, never the experiment files
    written = yaml.safe_load((lab / "experiments" / "my-exp" / "config.yaml").read_text())
    assert written.get("grpo", {}).get("kl_coef") != 0.05


async def test_two_pools(gpu_console: Console) -> None:
    c = gpu_console
    lab = await c.lab(
        "my-exp",
        method="verl/grpo",
        config={"model": "Qwen/Qwen3.5-9B", "data": {"train": "data/train.parquet", "validation": "data/val.parquet"}},
        files={"data/train.parquet": "x", "data/val.parquet": "y"},
    )
    job = await _submit(c, lab, "my-exp", "--profile", "train=h200:8", "--profile", "rollout=h100:2")
    assert [(p.name, p.series, p.gpus_per_node) for p in job.pools] == [("train", "h200", 8), ("rollout", "h100", 2)]
    _, rayjob = await _dispatched(c, job)
    groups = {g["groupName"]: g for g in rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"]}
    assert set(groups) == {"rollout"}  # train's only node is the head
    assert groups["rollout"]["replicas"] == 1
    assert _gpus(groups["rollout"]["template"]["spec"]["containers"][0]) == 2


async def test_verl_with_model_and_data(gpu_console: Console) -> None:
    c = gpu_console
    lab = await c.lab("my-verl", method="verl/ppo", files={"data/train.parquet": "x", "data/val.parquet": "y"})
    job = await _submit(
        c,
        lab,
        "my-verl",
        "--model",
        "Qwen/Qwen3.5-9B",
        "--train-data",
        "data/train.parquet",
        "--validation-data",
        "data/val.parquet",
    )
    assert job.spec.model == "Qwen/Qwen3.5-9B"
    capsule, _ = await _dispatched(c, job)
    assert (capsule["run"]["train_data"], capsule["run"]["validation_data"]) == (
        "data/train.parquet",
        "data/val.parquet",
    )


async def test_verl_with_a_platform_dataset(gpu_console: Console, tmp_path: pathlib.Path) -> None:
    c = gpu_console
    accounts = acc_grpc.AccountServiceStub(c.channel)
    alice = (await accounts.CreateUser(acc.CreateUserRequest(name="alice"), metadata=c.md)).token
    admin_token, c.token = c.token, alice
    try:
        data = tmp_path / "gsm8k"
        data.mkdir()
        (data / "train.parquet").write_text("train rows")
        (data / "val.parquet").write_text("val rows")
        await c.sf_async("dataset", "push", "gsm8k-zh", str(data), "--version", "v1")
        (data / "train.parquet").write_text("train rows, cleaned")
        await c.sf_async("dataset", "push", "gsm8k-zh", str(data), "--version", "v2")
        lab = await c.lab(
            "my-verl",
            method="verl/grpo",
            config={
                "model": "Qwen/Qwen3.5-9B",
                "data": {"validation": {"dataset": "alice/gsm8k-zh@v2", "path": "val.parquet"}},
            },
        )
        job = await _submit(c, lab, "my-verl", "--train-dataset", "alice/gsm8k-zh@v2", "--train-data", "train.parquet")
        assert job.spec.train_data.dataset == "alice/gsm8k-zh@v2"
        capsule, rayjob = await _dispatched(c, job)
        env = {
            e["name"]: e.get("value")
            for e in rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["env"]
        }
        assert env["TRAIN_DATA_DIR"].endswith("/train")
        assert capsule["run"]["train_data"] == "train.parquet"
        r = await c.sf_async(
            "submit",
            "my-verl",
            "--train-dataset",
            "alice/gsm8k-zh@v2",
            "--train-data",
            "nope.parquet",
            cwd=lab,
            check=False,
        )
        assert r.returncode == 3
        assert "nope.parquet is not in dataset alice/gsm8k-zh@v2 (its files: train.parquet, val.parquet)" in r.stderr
    finally:
        c.token = admin_token


async def test_custom_with_an_image(gpu_console: Console) -> None:
    c = gpu_console
    lab = await c.lab("my-custom", config={"image": ""})
    job = await _submit(c, lab, "my-custom", "--profile", "h200:8", "--image", "myregistry.io/train:v1")
    assert job.image == "myregistry.io/train:v1"
    _, rayjob = await _dispatched(c, job)
    head = rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert head["image"] == "myregistry.io/train:v1"
    assert _gpus(head) == 8
