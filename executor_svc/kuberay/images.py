"""The image digest of a kuberay attempt: what the kubelet reports for the head pod's container.

KubeRay records the head pod's name in the RayJob's status (`rayClusterStatus.head.podName`); the
capsule runs in that pod's `ray-head` container, and the kubelet writes the digest of the image it
started into the pod's `status.containerStatuses[].imageID` ("docker-pullable://repo@sha256:...",
"repo@sha256:..." or "sha256:..." depending on the container runtime). Pure: kube.py reads the pod.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from executor_svc.kuberay.builder import HEAD_CONTAINER

_DIGEST = re.compile(r"(sha256:[0-9a-f]{64})$")


def head_pod_name(status: Mapping[str, Any] | None) -> str:
    """The head pod's name from a RayJob's status ("" before KubeRay made it)."""
    cluster = (status or {}).get("rayClusterStatus") or {}
    head = cluster.get("head") or {} if isinstance(cluster, Mapping) else {}
    return str(head.get("podName") or "") if isinstance(head, Mapping) else ""


def container_digest(pod: Mapping[str, Any], container: str = HEAD_CONTAINER) -> str:
    """`sha256:<hex>` of the image the kubelet started for `container` ("" before it started)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    for entry in statuses:
        if isinstance(entry, Mapping) and entry.get("name") == container:
            found = _DIGEST.search(str(entry.get("imageID") or ""))
            return found[1] if found else ""
    return ""
