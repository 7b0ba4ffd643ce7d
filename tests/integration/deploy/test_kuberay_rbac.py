"""The kuberay executor's Role (deploy/kubernetes) grants exactly what the executor uses.

Two sources of what it uses, each checked against the Role:
- recorded: the KubeRayExecutor runs a whole launch / observe / stop / cleanup / restart cycle
  against the real API server (shared/k8s) with every request of its client recorded as
  (verb, group, resource, subresource);
- read: every Kubernetes API call in executor_svc/kuberay (the client methods it calls), so the
  calls the test server cannot complete (it has no core API: the Secret of an attempt is refused
  at create, so its update and patch are never reached) are covered too.
The recorded set must be inside the read set (the reading misses nothing the executor did), and
the Role must grant the read set exactly: every call is allowed and nothing else is.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import pathlib
import threading
import urllib.parse
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from starforge_api.job.v1 import job_state_pb2 as st

from common import errors
from executor_svc.kuberay import builder, kube, names
from executor_svc.kuberay.executor import KubeRayExecutor
from tests.integration.backends.kube import Kube
from tests.unit.kuberay.requests import config, request

from .kube_schema import render

pytestmark = pytest.mark.kube

ROOT = pathlib.Path(__file__).resolve().parents[3]
KUBERAY = ROOT / "executor_svc" / "kuberay"
Access = tuple[str, str, str, str]  # (verb, group, resource, subresource)


def parse_request(method: str, url: str) -> Access:
    """The RBAC access a request needs: /apis/G/V/namespaces/N/R/NAME/SUB?watch=true -> (verb, G, R, SUB)."""
    parsed = urllib.parse.urlsplit(url)
    parts = [p for p in parsed.path.split("/") if p]
    if parts[0] == "api":
        group, rest = "", parts[2:]
    elif parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        raise AssertionError(f"not a resource request: {method} {url}")
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    resource, named, sub = rest[0], len(rest) > 1, rest[2] if len(rest) > 2 else ""
    query = dict(urllib.parse.parse_qsl(parsed.query))
    verb = {
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if named else "deletecollection",
    }.get(method)
    if method == "GET":
        verb = "get" if named else ("watch" if query.get("watch") in ("true", "True", "1") else "list")
    assert verb, f"unexpected method {method}"
    return verb, group, resource, sub


def test_parse_request() -> None:
    base = "https://h:1/apis/ray.io/v1/namespaces/ns/rayjobs"
    assert parse_request("GET", base + "?labelSelector=a%3Db") == ("list", "ray.io", "rayjobs", "")
    assert parse_request("GET", base + "?watch=true&resourceVersion=5") == ("watch", "ray.io", "rayjobs", "")
    assert parse_request("GET", base + "/sf-x") == ("get", "ray.io", "rayjobs", "")
    assert parse_request("PATCH", base + "/sf-x/status") == ("patch", "ray.io", "rayjobs", "status")
    assert parse_request("DELETE", "https://h:1/api/v1/namespaces/ns/secrets/s") == ("delete", "", "secrets", "")
    assert parse_request("PUT", "https://h:1/api/v1/namespaces/ns/secrets/s") == ("update", "", "secrets", "")


# -- what the code calls -------------------------------------------------------------------

CLIENT_VERBS = {
    "create": "create",
    "read": "get",
    "get": "get",
    "list": "list",
    "replace": "update",
    "patch": "patch",
    "delete": "delete",
}


def calls_in_code() -> set[Access]:
    """Every Kubernetes API access executor_svc/kuberay's code makes, read from its calls of the
    client's methods (`self.custom.create_namespaced_custom_object(...)`, also when passed to
    `_call`); a list call with `watch=True` is a watch."""
    found: set[Access] = set()
    for path in sorted(KUBERAY.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            targets = [node.func, *node.args]
            for t in targets:
                if not (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Attribute)):
                    continue
                api = t.value.attr
                if api not in ("custom", "core"):
                    continue
                action, _, rest = t.attr.partition("_namespaced_")
                assert action in CLIENT_VERBS and rest, f"{path.name}: unexpected client call {api}.{t.attr}"
                sub = ""
                for s in ("_status", "_scale"):
                    if rest.endswith(s):
                        rest, sub = rest[: -len(s)], s[1:]
                if api == "custom":
                    assert rest == "custom_object", t.attr
                    group, resource = builder.GROUP, builder.PLURAL
                else:
                    group, resource = "", rest + "s"
                watch = any(
                    k.arg == "watch" and isinstance(k.value, ast.Constant) and k.value.value is True
                    for k in node.keywords
                )
                found.add(("watch" if watch and action == "list" else CLIENT_VERBS[action], group, resource, sub))
    return found


def test_the_code_reading_sees_the_calls() -> None:
    assert calls_in_code() == {
        ("create", "ray.io", "rayjobs", ""),
        ("get", "ray.io", "rayjobs", ""),
        ("list", "ray.io", "rayjobs", ""),
        ("watch", "ray.io", "rayjobs", ""),
        ("delete", "ray.io", "rayjobs", ""),
        ("get", "", "pods", ""),
        ("create", "", "secrets", ""),
        ("update", "", "secrets", ""),
        ("patch", "", "secrets", ""),
        ("delete", "", "secrets", ""),
    }


# -- what the Role grants ------------------------------------------------------------------


def role_grants() -> set[Access]:
    objs = render(str(ROOT / "deploy" / "kubernetes" / "base"))
    (role,) = [o for o in objs if o["kind"] == "Role" and o["metadata"]["name"] == "starforge-executor-kuberay"]
    (binding,) = [o for o in objs if o["kind"] == "RoleBinding" and o["roleRef"]["name"] == role["metadata"]["name"]]
    (executor,) = [
        o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == "starforge-executor-kuberay"
    ]
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": executor["spec"]["template"]["spec"]["serviceAccountName"],
            "namespace": executor["metadata"]["namespace"],
        }
    ]
    assert not [o for o in objs if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    grants: set[Access] = set()
    for rule in role["rules"]:
        assert "resourceNames" not in rule and "nonResourceURLs" not in rule, rule
        for group in rule["apiGroups"]:
            for res in rule["resources"]:
                for verb in rule["verbs"]:
                    assert "*" not in (group, res, verb), f"wildcard in {rule}"
                    resource, _, sub = res.partition("/")
                    grants.add((verb, group, resource, sub))
    return grants


# -- what the executor does, recorded --------------------------------------------------------


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Iterator[set[Access]]:
    """Every request of the executors' Kubernetes clients (not the test's own), as accesses."""
    seen: set[Access] = set()
    lock = threading.Lock()
    original = kube.load_client

    def load_client(cfg: Any) -> client.ApiClient:
        api = original(cfg)
        call_api = api.call_api

        def recording(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            with lock:
                seen.add(parse_request(method, url))
            return call_api(method, url, *args, **kwargs)

        api.call_api = recording  # type: ignore[method-assign]
        return api

    monkeypatch.setattr(kube, "load_client", load_client)
    yield seen


async def _wait(ex: KubeRayExecutor, attempt_id: str, state: int) -> None:
    for _ in range(300):
        (obs,) = await ex.observe([attempt_id])
        if obs.state == state:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{attempt_id} never reached {state}: {obs}")


async def test_the_role_grants_exactly_what_the_executor_uses(kube: Kube, recorded: set[Access]) -> None:
    namespace = f"rbac-{uuid.uuid4().hex[:8]}"
    cfg = config(kubeconfig=str(kube.kubeconfig), namespace=namespace, out_volume_claim="starforge-out")

    def status(name: str, **values: Any) -> None:
        kube.custom.patch_namespaced_custom_object_status(
            builder.GROUP, builder.VERSION, namespace, builder.PLURAL, name, {"status": values}
        )

    def collect_garbage(name: str) -> None:
        kube.custom.patch_namespaced_custom_object(
            builder.GROUP, builder.VERSION, namespace, builder.PLURAL, name, {"metadata": {"finalizers": None}}
        )

    ex = await KubeRayExecutor.create(cfg)
    try:
        assert await asyncio.to_thread(ex.watch.wait_synced, 10), ex.watch.last_error
        await ex.describe()
        stopped, finished = request(), request()
        for r in (stopped, finished):
            assert not (await ex.launch(r)).already_launched
        assert (await ex.launch(finished)).already_launched
        for r in (stopped, finished):
            name = names.rayjob_name(r.attempt_id)
            status(
                name,
                jobDeploymentStatus="Running",
                jobStatus="RUNNING",
                rayClusterName=f"{name}-c",
                rayClusterStatus={"head": {"podName": f"{name}-head"}},
            )
            await _wait(ex, r.attempt_id, st.JOB_STATE_RUNNING)  # and asks for the head pod (image digest)
        assert await ex.stop(stopped.attempt_id, 10)
        collect_garbage(names.rayjob_name(stopped.attempt_id))
        status(names.rayjob_name(finished.attempt_id), jobDeploymentStatus="Complete", jobStatus="SUCCEEDED")
        await _wait(ex, finished.attempt_id, st.JOB_STATE_SUCCEEDED)
        assert await ex.cleanup(finished.attempt_id) == 1
        collect_garbage(names.rayjob_name(finished.attempt_id))
        await ex.list_attempts()
    finally:
        await ex.close()
    # A restarted executor whose watch has not synced yet reads objects with GET.
    again = await KubeRayExecutor.create(cfg)
    try:
        await again.observe([stopped.attempt_id])
        await again.list_attempts()
    finally:
        await again.close()
    # The Secret path, as far as a server without the core API lets it go: create (refused),
    # and Cleanup's delete.
    secret_cfg = dataclasses.replace(cfg, use_secret_for_token=True)
    with_secret = await KubeRayExecutor.create(secret_cfg)
    try:
        with pytest.raises(errors.Unavailable, match="serves no core/v1 Secrets"):
            await with_secret.launch(request())
        assert await with_secret.cleanup(request().attempt_id) == 0
    finally:
        await with_secret.close()

    assert recorded == {
        ("create", "ray.io", "rayjobs", ""),
        ("get", "ray.io", "rayjobs", ""),
        ("list", "ray.io", "rayjobs", ""),
        ("watch", "ray.io", "rayjobs", ""),
        ("delete", "ray.io", "rayjobs", ""),
        ("get", "", "pods", ""),
        ("create", "", "secrets", ""),
        ("delete", "", "secrets", ""),
    }
    used = calls_in_code()
    assert recorded <= used, f"the executor made calls the code reading missed: {recorded - used}"
    grants = role_grants()
    assert used - grants == set(), "the Role misses calls the executor makes"
    assert grants - used == set(), "the Role grants access the executor never uses"
