"""LaunchRequests for kuberay tests, built by hand (no blob server: digests of made-up content).

Shared by the unit tests (builder, states) and the integration tests against the API server,
which never run pods and so never fetch the files.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from starforge_api.executor.v1 import launch_request_pb2 as lr_pb
from starforge_api.job.v1 import job_spec_pb2 as spec_pb
from starforge_api.job.v1 import workspace_pb2 as ws_pb

from common import ids
from executor_svc.kuberay.config import KubeRayConfig, SeriesConfig, TolerationConfig

INGEST_TOKEN = "sfr_ingest0000_SECRET-INGEST-TOKEN-abcdefghijkl"
BLOB_TOKEN = "sfr_blobtoken0_SECRET-BLOB-TOKEN-abcdefghijklmn"
HF_TOKEN = "hf_SECRET_HUGGINGFACE_TOKEN_value"
IMAGE = "registry.local/train:v1"


def _file(path: str, content: bytes, executable: bool = False) -> ws_pb.WorkspaceFile:
    return ws_pb.WorkspaceFile(
        path=path, sha256=hashlib.sha256(content).hexdigest(), size=len(content), executable=executable
    )


def pool(series: str, gpus: int = 0, nodes: int = 1, name: str = "main") -> spec_pb.Pool:
    profile = f"{series}:{gpus * nodes}" if gpus else series
    return spec_pb.Pool(name=name, series=series, nodes=nodes, gpus_per_node=gpus, profile=profile)


def request(
    pools: Sequence[spec_pb.Pool] | None = None,
    *,
    job_id: str | None = None,
    attempt_number: int = 1,
    env: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    http_url: str = "http://control.starforge.svc:7080",
) -> lr_pb.LaunchRequest:
    """A complete LaunchRequest for `pools` (default: one CPU node)."""
    job_id = job_id or ids.new_job_id()
    attempt_id = ids.attempt_id(job_id, attempt_number)
    capsule_json = f'{{"schema": "starforge.capsule/v2", "attempt_id": "{attempt_id}"}}'.encode()
    return lr_pb.LaunchRequest(
        attempt_id=attempt_id,
        job_id=job_id,
        attempt_number=attempt_number,
        owner="tester",
        project="@tester/lab",
        spec=spec_pb.JobSpec(api_version="forge/v2", method="custom/custom"),
        pools=list(pools) if pools is not None else [pool("cpu")],
        image=IMAGE,
        capsule=lr_pb.Capsule(
            files=[
                _file("bootstrap.sh", b"#!/bin/sh\n", True),
                _file("capsule.json", capsule_json),
                _file("runner-0123456789abcdef.pex", b"runner"),
            ],
            capsule_digest=hashlib.sha256(capsule_json).hexdigest(),
        ),
        blob_source=lr_pb.BlobSource(address="control:7070", token=BLOB_TOKEN, http_url=http_url),
        ingest=lr_pb.IngestTarget(address="control.starforge.svc:7070", token=INGEST_TOKEN),
        env=dict(env or {"WANDB_MODE": "offline"}),
        secret_env={"HF_TOKEN": HF_TOKEN},
        labels=dict(labels or {"starforge.dev/owner": "tester", "starforge.dev/project": "@tester/lab"}),
        stop_grace_seconds=20,
    )


def config(**overrides: object) -> KubeRayConfig:
    """A config with a CPU series and two GPU series (h200: 8 per node, h100: 8 per node)."""
    gpu_taint = [TolerationConfig(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")]
    values: dict[str, object] = {
        "namespace": "default",
        "inventory": [
            SeriesConfig(series="cpu", nodes=4, cpu="4", memory="16Gi"),
            SeriesConfig(
                series="h200",
                nodes=2,
                gpus_per_node=8,
                cpu="96",
                memory="1600Gi",
                node_selector={"nvidia.com/gpu.product": "NVIDIA-H200"},
                tolerations=gpu_taint,
            ),
            SeriesConfig(
                series="h100",
                nodes=2,
                gpus_per_node=8,
                cpu="64",
                memory="1000Gi",
                node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                tolerations=gpu_taint,
            ),
        ],
        "out_volume_claim": "starforge-out",
        "service_account": "starforge-jobs",
    }
    values.update(overrides)
    return KubeRayConfig(**values)  # type: ignore[arg-type]
