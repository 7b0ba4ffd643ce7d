"""LaunchRequest -> RayJob manifest (builder.py): shape, env, resources, refusals, secrets."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from common import errors
from executor_svc.base import LABEL_ATTEMPT, LABEL_EXECUTOR, LABEL_JOB, LABEL_MANAGED
from executor_svc.kuberay import builder
from executor_svc.kuberay.config import SeriesConfig

from .requests import BLOB_TOKEN, HF_TOKEN, IMAGE, INGEST_TOKEN, config, pool, request

LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def head(manifest: dict[str, Any]) -> dict[str, Any]:
    group: dict[str, Any] = manifest["spec"]["rayClusterSpec"]["headGroupSpec"]
    return group


def workers(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    return list(manifest["spec"]["rayClusterSpec"].get("workerGroupSpecs", []))


def test_single_pool_cpu_job() -> None:
    req = request()
    built = builder.build(req, config())
    m = built.manifest
    assert m["apiVersion"] == "ray.io/v1"
    assert m["kind"] == "RayJob"
    assert built.name == "sf-" + req.attempt_id.replace(".", "-")
    assert m["metadata"]["name"] == built.name
    spec = m["spec"]
    assert spec["entrypoint"] == "sh /forge/capsule/bootstrap.sh"
    assert spec["shutdownAfterJobFinishes"] is True
    assert spec["submissionMode"] == "K8sJobMode"
    assert spec["backoffLimit"] == 0
    assert spec["ttlSecondsAfterFinished"] == 300
    assert spec["rayClusterSpec"]["rayVersion"] == "2.60.0"
    assert workers(m) == []
    pod = head(m)["template"]["spec"]
    (main,) = pod["containers"]
    assert main["image"] == IMAGE
    assert main["imagePullPolicy"] == "IfNotPresent"
    assert main["resources"] == {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {"cpu": "4", "memory": "16Gi"}}
    assert pod["serviceAccountName"] == "starforge-jobs"
    assert pod["terminationGracePeriodSeconds"] == 20 + 30
    env = env_of(main)
    assert env["FORGE_CAPSULE_DIR"] == "/forge/capsule"
    assert env["FORGE_WORKSPACE_DIR"] == "/forge/workspace"
    assert env["FORGE_OUT_DIR"] == "/forge/out"
    assert env["FORGE_SCRATCH_DIR"] == "/forge/scratch"
    assert env["FORGE_CAPSULE_SHA256"] == req.capsule.capsule_digest
    assert env["FORGE_INGEST_ADDR"] == req.ingest.address
    assert "FORGE_INGEST_TOKEN" not in env, "the training container never has the run token"
    assert env["FORGE_INGEST_TOKEN_FILE"] == "/forge/scratch/.forge-ingest-token"
    fetch = env_of(pod["initContainers"][0])
    assert fetch["FORGE_INGEST_TOKEN"] == INGEST_TOKEN
    assert fetch["FORGE_INGEST_TOKEN_FILE"] == "/forge/scratch/.forge-ingest-token"
    assert {"name": "forge-scratch", "mountPath": "/forge/scratch"} in pod["initContainers"][0]["volumeMounts"]
    assert env["FORGE_JOB_ID"] == req.job_id
    assert env["FORGE_ATTEMPT_ID"] == req.attempt_id
    assert env["FORGE_ATTEMPT_NUMBER"] == "1"
    assert env["FORGE_RESUME"] == "0"
    assert env["FORGE_STOP_GRACE_SECONDS"] == "20"
    assert env["WANDB_MODE"] == "offline"
    assert env["HF_TOKEN"] == HF_TOKEN
    assert "FORGE_BLOB_TOKEN" not in env
    mounts = {v["mountPath"]: v for v in main["volumeMounts"]}
    assert mounts["/forge/out"]["subPath"] == req.job_id
    assert mounts["/forge/capsule"]["readOnly"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["forge-out"] == {"name": "forge-out", "persistentVolumeClaim": {"claimName": "starforge-out"}}
    assert volumes["forge-capsule"]["emptyDir"] == {}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory"}


def test_every_pod_fetches_the_capsule_with_the_fetch_script() -> None:
    req = request([pool("h200", 8, nodes=2)])
    m = builder.build(req, config()).manifest
    for template in [head(m)["template"], *(w["template"] for w in workers(m))]:
        (init,) = template["spec"]["initContainers"]
        assert init["image"] == IMAGE
        assert init["command"][:3] == ["python3", "-I", "-c"]
        assert init["command"][3] == builder.fetch_source()
        env = env_of(init)
        assert env["FORGE_BLOB_URL"] == req.blob_source.http_url
        assert env["FORGE_BLOB_TOKEN"] == BLOB_TOKEN
        assert env["FORGE_CAPSULE_SHA256"] == req.capsule.capsule_digest
        files = json.loads(env["FORGE_FETCH_FILES"])
        assert sorted(f[1] for f in files) == sorted(f.path for f in req.capsule.files)
        assert all(f[0] == "capsule" for f in files)
        assert next(f for f in files if f[1] == "bootstrap.sh")[4] is True
        assert "nvidia.com/gpu" not in json.dumps(init.get("resources", {}))


def test_single_pool_16_gpus_on_two_nodes() -> None:
    req = request([pool("h200", 8, nodes=2)])
    m = builder.build(req, config()).manifest
    h = head(m)["template"]["spec"]
    assert h["containers"][0]["resources"]["limits"] == {"cpu": "96", "memory": "1600Gi", "nvidia.com/gpu": "8"}
    assert h["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200"}
    assert h["tolerations"] == [{"operator": "Exists", "key": "nvidia.com/gpu", "effect": "NoSchedule"}]
    (w,) = workers(m)
    assert w["groupName"] == "main"
    assert w["replicas"] == w["minReplicas"] == w["maxReplicas"] == 1
    (c,) = w["template"]["spec"]["containers"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert w["template"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200"}
    env = env_of(c)
    assert "FORGE_INGEST_TOKEN" not in env, "only the head's runner reports"
    assert "FORGE_INGEST_TOKEN_FILE" not in env
    assert "FORGE_INGEST_TOKEN" not in env_of(w["template"]["spec"]["initContainers"][0])
    assert env["HF_TOKEN"] == HF_TOKEN
    assert env["FORGE_OUT_DIR"] == "/forge/out"


def test_multi_pool_job_gets_one_worker_group_per_further_pool() -> None:
    req = request([pool("h200", 8, name="train"), pool("h100", 2, name="rollout")])
    m = builder.build(req, config()).manifest
    assert head(m)["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
    (w,) = workers(m)  # train has one node: the head; rollout adds one worker
    assert w["groupName"] == "rollout"
    assert w["replicas"] == 1
    spec = w["template"]["spec"]
    assert spec["containers"][0]["resources"]["limits"] == {"cpu": "64", "memory": "1000Gi", "nvidia.com/gpu": "2"}
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    pools = json.loads(m["metadata"]["annotations"][builder.ANN_POOLS])
    assert [(p["name"], p["series"], p["gpus_per_node"]) for p in pools] == [
        ("train", "h200", 8),
        ("rollout", "h100", 2),
    ]


def test_labels_are_label_safe_and_originals_are_annotated() -> None:
    req = request(labels={"starforge.dev/project": "@tester/lab", "starforge.dev/note": "x" * 80})
    m = builder.build(req, config()).manifest
    labels = m["metadata"]["labels"]
    assert labels[LABEL_ATTEMPT] == req.attempt_id
    assert labels[LABEL_JOB] == req.job_id
    assert labels[LABEL_MANAGED] == "starforge"
    assert labels[LABEL_EXECUTOR] == "kuberay"
    assert all(len(v) <= 63 and LABEL_VALUE.match(v) for v in labels.values())
    original = json.loads(m["metadata"]["annotations"][builder.ANN_LABELS])
    assert original["starforge.dev/project"] == "@tester/lab"
    assert m["metadata"]["annotations"][builder.ANN_ATTEMPT] == req.attempt_id
    assert head(m)["template"]["metadata"]["labels"] == labels


def test_secrets_never_in_labels_or_annotations() -> None:
    m = builder.build(request(), config()).manifest
    meta = json.dumps([m["metadata"], head(m)["template"]["metadata"]])
    for secret in (INGEST_TOKEN, BLOB_TOKEN, HF_TOKEN):
        assert secret not in meta


def test_use_secret_for_token_keeps_every_secret_out_of_the_rayjob() -> None:
    req = request([pool("h200", 8, nodes=2)])
    built = builder.build(req, config(use_secret_for_token=True))
    text = json.dumps(built.manifest)
    for secret in (INGEST_TOKEN, BLOB_TOKEN, HF_TOKEN):
        assert secret not in text
    assert built.secret_data == {
        "HF_TOKEN": HF_TOKEN,
        "FORGE_INGEST_TOKEN": INGEST_TOKEN,
        "FORGE_BLOB_TOKEN": BLOB_TOKEN,
    }
    ref = {"secretKeyRef": {"name": built.secret_name, "key": "FORGE_INGEST_TOKEN"}}
    init = head(built.manifest)["template"]["spec"]["initContainers"][0]
    assert env_of(init)["FORGE_INGEST_TOKEN"] == ref
    assert env_of(init)["FORGE_BLOB_TOKEN"] == {"secretKeyRef": {"name": built.secret_name, "key": "FORGE_BLOB_TOKEN"}}


def test_env_values_are_escaped_for_kubernetes_expansion() -> None:
    m = builder.build(request(env={"CMD": "echo $(HOME) $HOME"}), config()).manifest
    assert env_of(head(m)["template"]["spec"]["containers"][0])["CMD"] == "echo $$(HOME) $HOME"


def test_forge_variables_win_over_request_env() -> None:
    m = builder.build(request(env={"FORGE_OUT_DIR": "/elsewhere"}), config()).manifest
    assert env_of(head(m)["template"]["spec"]["containers"][0])["FORGE_OUT_DIR"] == "/forge/out"


def test_the_jobs_pex_root_is_its_commands_and_the_runner_keeps_the_scratch_one() -> None:
    """A PEX_ROOT the job chose would hold the code its runner runs (executor_svc/capsule_env.py)."""
    env = env_of(
        head(builder.build(request(env={"PEX_ROOT": "/tmp/pex"}), config()).manifest)["template"]["spec"]["containers"][
            0
        ]
    )
    assert (env["PEX_ROOT"], env["FORGE_JOB_ENV_PEX_ROOT"]) == ("/forge/scratch/.pex", "/tmp/pex")
    env = env_of(head(builder.build(request(), config()).manifest)["template"]["spec"]["containers"][0])
    assert env["PEX_ROOT"] == "/forge/scratch/.pex" and "FORGE_JOB_ENV_PEX_ROOT" not in env


def test_without_out_claim_out_dir_is_an_empty_dir() -> None:
    built = builder.build(request(), config(out_volume_claim=""))
    pod = head(built.manifest)["template"]["spec"]
    assert {"name": "forge-out", "emptyDir": {}} in pod["volumes"]
    assert all("subPath" not in v for v in pod["containers"][0]["volumeMounts"])
    assert "emptyDir" in built.out_dir


def test_build_is_deterministic() -> None:
    req = request([pool("h200", 8, nodes=2)])
    assert builder.build(req, config()).manifest == builder.build(req, config()).manifest


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda r: r.pools[0].__setattr__("series", "a100"), "pools[0].series"),
        (lambda r: r.pools[0].__setattr__("gpus_per_node", 16), "pools[0].gpus_per_node"),
        (lambda r: r.pools[0].__setattr__("nodes", 5), "pools[0].nodes"),
        (lambda r: r.__setattr__("image", ""), "image"),
        (lambda r: r.blob_source.__setattr__("http_url", ""), "blob_source.http_url"),
        (lambda r: r.ClearField("pools"), "pools"),
        (lambda r: r.env.__setitem__("BAD=NAME", "x"), "env[BAD=NAME]"),
    ],
)
def test_refusals_name_the_field(mutate: Any, field: str) -> None:
    req = request([pool("h200", 8)])
    mutate(req)
    with pytest.raises(errors.InvalidArgument) as info:
        builder.build(req, config())
    assert [v.field for v in info.value.field_violations] == [field]


def test_refusal_message_lists_the_inventory() -> None:
    with pytest.raises(errors.InvalidArgument, match=r"series 'a100' is not in .*\(cpu, h200, h100\)"):
        builder.build(request([pool("a100", 8)]), config())


def test_cpu_only_series_on_gpu_request_is_refused() -> None:
    cfg = config(inventory=[SeriesConfig(series="cpu", nodes=1)])
    with pytest.raises(errors.InvalidArgument, match="GPUs per node"):
        builder.build(request([pool("cpu", 1)]), cfg)


def test_fetch_files_limit() -> None:
    req = request()
    ds = req.datasets.add(name="train")
    for i in range(2000):
        ds.manifest.files.add(path=f"shard-{i:05d}.jsonl", sha256="a" * 64, size=1)
    with pytest.raises(errors.InvalidArgument, match="environment variable limited"):
        builder.build(req, config())


def test_datasets_are_fetched_and_exposed() -> None:
    req = request()
    ds = req.datasets.add(name="train", ref="tester/train@1")
    ds.manifest.files.add(path="a.jsonl", sha256="b" * 64, size=3)
    m = builder.build(req, config()).manifest
    pod = head(m)["template"]["spec"]
    assert env_of(pod["containers"][0])["TRAIN_DATA_DIR"] == "/forge/datasets/train"
    files = json.loads(env_of(pod["initContainers"][0])["FORGE_FETCH_FILES"])
    assert ["datasets", "train/a.jsonl", "b" * 64, 3, False] in files
    assert any(v["mountPath"] == "/forge/datasets" for v in pod["containers"][0]["volumeMounts"])
