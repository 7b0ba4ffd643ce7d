"""The kuberay image digest: the head pod's name from the RayJob status, the imageID from the pod (pure)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from executor_svc.kuberay.builder import HEAD_CONTAINER
from executor_svc.kuberay.images import container_digest, head_pod_name

DIGEST = "sha256:" + "ab" * 32


def pod(*statuses: Mapping[str, object]) -> dict[str, object]:
    return {"kind": "Pod", "status": {"phase": "Running", "containerStatuses": list(statuses)}}


def test_head_pod_name_comes_from_the_ray_cluster_status() -> None:
    assert head_pod_name({"rayClusterStatus": {"head": {"podName": "rj-head-x7k2p", "podIP": "10.0.0.5"}}}) == (
        "rj-head-x7k2p"
    )
    assert head_pod_name({"jobStatus": "RUNNING"}) == ""
    assert head_pod_name(None) == ""
    assert head_pod_name({"rayClusterStatus": {"head": None}}) == ""


@pytest.mark.parametrize(
    "image_id",
    [
        f"docker-pullable://registry.local/train@{DIGEST}",  # dockershim / cri-dockerd
        f"registry.local/train@{DIGEST}",  # containerd, CRI-O
        DIGEST,  # an image loaded without a repository digest
    ],
)
def test_the_head_containers_image_id_is_the_digest(image_id: str) -> None:
    sidecar = {"name": "sidecar", "imageID": "registry.local/other@sha256:" + "cd" * 32}
    assert container_digest(pod(sidecar, {"name": HEAD_CONTAINER, "imageID": image_id})) == DIGEST


def test_no_digest_before_the_container_started() -> None:
    assert container_digest(pod({"name": HEAD_CONTAINER, "imageID": ""})) == ""
    assert container_digest(pod()) == ""
    assert container_digest({"status": {"phase": "Pending"}}) == ""
    assert container_digest(pod({"name": HEAD_CONTAINER, "imageID": "registry.local/train:v1"})) == ""
