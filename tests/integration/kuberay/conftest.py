"""Fixtures for kuberay tests: the real CRD API server, a namespace per test, executors on it.

Every test gets its own namespace (any name works on this server without creating it), so the
watch, list_attempts and describe of one test never see another test's RayJobs. Tests play the
KubeRay operator (writing status through the status subresource) and the garbage collector
(removing the foregroundDeletion finalizer) with the helpers below.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import pytest
from kubernetes.client.exceptions import ApiException

from executor_svc.base import Observation
from executor_svc.kuberay.builder import GROUP, PLURAL, VERSION
from executor_svc.kuberay.config import KubeRayConfig
from executor_svc.kuberay.executor import KubeRayExecutor
from tests.integration.backends.kube import Kube, kube  # noqa: F401 - session fixture
from tests.unit.kuberay.requests import config

MakeExecutor = Callable[..., Awaitable[KubeRayExecutor]]


@pytest.fixture
def namespace() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def kube_config(kube: Kube, namespace: str) -> KubeRayConfig:  # noqa: F811
    return config(kubeconfig=str(kube.kubeconfig), namespace=namespace)


@pytest.fixture
async def make_executor(kube_config: KubeRayConfig) -> AsyncIterator[MakeExecutor]:
    """Start executors (the watch synced) and close them all at the end."""
    made: list[KubeRayExecutor] = []

    async def make(cfg: KubeRayConfig | None = None, *, synced: bool = True) -> KubeRayExecutor:
        ex = await KubeRayExecutor.create(cfg or kube_config)
        made.append(ex)
        if synced:
            assert await asyncio.to_thread(ex.watch.wait_synced, 10), ex.watch.last_error
        return ex

    yield make
    for ex in made:
        await ex.close()


@pytest.fixture
async def executor(make_executor: MakeExecutor) -> KubeRayExecutor:
    return await make_executor()


class Operator:
    """Plays KubeRay (status) and the garbage collector (finalizers) for one namespace."""

    def __init__(self, kube: Kube, namespace: str) -> None:  # noqa: F811
        self.custom = kube.custom
        self.namespace = namespace

    def get(self, name: str) -> dict[str, Any] | None:
        try:
            found = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)
            return dict(cast(dict[str, Any], found))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def names(self) -> list[str]:
        found = cast(dict[str, Any], self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL))
        return sorted(i["metadata"]["name"] for i in found["items"])

    def status(self, name: str, **status: Any) -> None:
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, self.namespace, PLURAL, name, {"status": status}
        )

    def collect_garbage(self, name: str) -> None:
        """What the garbage collector does after a Foreground deletion: drop the finalizer."""
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name, {"metadata": {"finalizers": None}}
        )


@pytest.fixture
def operator(kube: Kube, namespace: str) -> Operator:  # noqa: F811
    return Operator(kube, namespace)


async def wait_state(
    ex: KubeRayExecutor, attempt_id: str, state: int, timeout: float = 3.0
) -> tuple[Observation, float]:
    """Observe until `state`; returns the observation and how long it took."""
    start = time.monotonic()
    while True:
        (obs,) = await ex.observe([attempt_id])
        if obs.state == state:
            return obs, time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{attempt_id} not in state {state} after {timeout}s: {obs}")
        await asyncio.sleep(0.02)
