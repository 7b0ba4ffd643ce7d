"""deploy/kubernetes: every rendered object against the Kubernetes API's schemas, every reference
resolved, every component's config file accepted by that component's own loader.

The base and the example overlay are rendered with `kubectl kustomize` (offline). Built-in kinds
are walked through the kubernetes client's models; custom resources go to the real API server
(shared/k8s) as a server-side dry-run. The checker is shown to fail on broken objects.
"""

from __future__ import annotations

import copy
import pathlib
from typing import Any

import pytest
import yaml

from control import config as control_config
from executor_svc.agent.config import AgentConfig
from executor_svc.config import load_service_config
from executor_svc.kuberay import builder
from executor_svc.kuberay.config import KubeRayConfig
from forgelet import config as forgelet_config
from tests.integration.backends.kube import Kube
from tests.unit.kuberay.requests import request

from .kube_schema import check_builtin, cross_references, dry_run_custom, model_for, render

ROOT = pathlib.Path(__file__).resolve().parents[3]
KUBE = ROOT / "deploy" / "kubernetes"
KUSTOMIZATIONS = ("base", "overlays/example")
# The Secrets an install creates itself (never in the repository), with their keys, as
# docs/deploy.md lists them.
EXTERNAL_SECRETS = {
    "starforge-tls": ("tls.crt", "tls.key", "ca.crt"),
    "starforge-secrets": (
        "database-url",
        "secrets.key",
        "fleets",
        "kuberay-executor-token",
        "agent-executor-token",
        "agent-control-token",
        "forgelet-token",
    ),
}
# starforge-secrets' `fleets` as docs/deploy.md shows it (the control plane's
# STARFORGE_FLEETS): the two executors of the render.
FLEETS = """
- name: k8s-h200
  kind: kuberay
  address: starforge-executor-kuberay:7071
  token: kuberay-executor-token-value
  inventory: [{series: h200, nodes: 4, gpus_per_node: 8}]
- name: gpu
  kind: agent
  address: starforge-executor-agent:7073
  token: agent-executor-token-value
  inventory: [{series: h200, nodes: 8, gpus_per_node: 8}]
"""


@pytest.fixture(scope="module", params=KUSTOMIZATIONS)
def rendered(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return render(str(KUBE / request.param))


def by(objs: list[dict[str, Any]], kind: str, name_prefix: str) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"].startswith(name_prefix)]
    assert found, f"no {kind} {name_prefix}* in the render"
    return found[0]


def config_file(objs: list[dict[str, Any]], configmap: str, key: str, tmp_path: pathlib.Path) -> pathlib.Path:
    """The ConfigMap's file, written out, so the component's own loader reads it."""
    cm = by(objs, "ConfigMap", f"{configmap}-")
    path = tmp_path / f"{configmap}-{key}"
    path.write_text(cm["data"][key])
    return path


def test_every_object_matches_the_api_schema(rendered: list[dict[str, Any]]) -> None:
    errors = [e for o in rendered for e in check_builtin(o)]
    assert errors == []
    assert {o["kind"] for o in rendered} >= {
        "Deployment",
        "DaemonSet",
        "Service",
        "ServiceAccount",
        "ConfigMap",
        "PersistentVolumeClaim",
        "Role",
        "RoleBinding",
        "PodDisruptionBudget",
        "NetworkPolicy",
    }


def test_every_reference_resolves(rendered: list[dict[str, Any]]) -> None:
    assert cross_references(rendered, EXTERNAL_SECRETS) == []


def test_two_namespaces_and_no_secret_values(rendered: list[dict[str, Any]]) -> None:
    """StarForge's namespace and the jobs': the kuberay executor's Role, the jobs' service account
    and their out volume are all the jobs' namespace holds, so the Role's Secret verbs reach no
    Secret of StarForge's."""
    declared = {o["metadata"]["name"] for o in rendered if o["kind"] == "Namespace"}
    used = {o["metadata"].get("namespace") for o in rendered if o["kind"] != "Namespace"}
    assert used == declared and len(declared) == 2, (used, declared)
    role = by(rendered, "Role", "starforge-executor-kuberay")
    jobs = role["metadata"]["namespace"]
    in_jobs = sorted(f"{o['kind']}/{o['metadata']['name']}" for o in rendered if o["metadata"].get("namespace") == jobs)
    assert in_jobs == [
        "PersistentVolumeClaim/starforge-out",
        "Role/starforge-executor-kuberay",
        "RoleBinding/starforge-executor-kuberay",
        "ServiceAccount/starforge-job",
    ]
    executor = by(rendered, "Deployment", "starforge-executor-kuberay")
    assert executor["metadata"]["namespace"] != jobs
    (subject,) = by(rendered, "RoleBinding", "starforge-executor-kuberay")["subjects"]
    assert subject["namespace"] == executor["metadata"]["namespace"]
    assert [o["metadata"]["name"] for o in rendered if o["kind"] == "Secret"] == []


def test_pods_are_locked_down(rendered: list[dict[str, Any]]) -> None:
    """Every container: no privilege escalation, no capabilities, read-only image, limits; every
    pod but forgelet's non-root (forgelet holds the docker socket: root-equivalent regardless)."""
    for o in rendered:
        if o["kind"] not in ("Deployment", "DaemonSet"):
            continue
        spec = o["spec"]["template"]["spec"]
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for c in spec.get("initContainers", []) + spec["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, c["name"]
            assert sc["readOnlyRootFilesystem"] is True, c["name"]
            assert sc["capabilities"] == {"drop": ["ALL"]}, c["name"]
            assert {"cpu", "memory"} <= set(c["resources"]["limits"]), c["name"]
            assert "privileged" not in sc
        if o["metadata"]["name"] != "starforge-forgelet":
            assert spec["securityContext"]["runAsNonRoot"] is True, o["metadata"]["name"]
        if o["metadata"]["name"] != "starforge-executor-kuberay":
            assert spec.get("automountServiceAccountToken") is False, o["metadata"]["name"]


def test_control_plane_shape(rendered: list[dict[str, Any]]) -> None:
    control = by(rendered, "Deployment", "starforge-control")
    assert control["spec"]["replicas"] == 2
    pvc = by(rendered, "PersistentVolumeClaim", "starforge-blobs")
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    pdb = by(rendered, "PodDisruptionBudget", "starforge-control")
    assert pdb["spec"]["minAvailable"] == 1


def test_config_files_load_with_the_components_own_loaders(
    rendered: list[dict[str, Any]], tmp_path: pathlib.Path
) -> None:
    env = {"STARFORGE_FLEETS": FLEETS, "STARFORGE_DATABASE_URL": "postgresql+psycopg://starforge@db/starforge"}
    control = control_config.load(config_file(rendered, "starforge-control", "control.yaml", tmp_path), env)
    assert control.database_url.startswith("postgresql")
    services = {o["metadata"]["name"]: o for o in rendered if o["kind"] == "Service"}
    for fleet in control.fleets:
        host, port = fleet.address.rsplit(":", 1)
        assert int(port) in [p["port"] for p in services[host]["spec"]["ports"]], fleet.address
    blobs = next(
        m["mountPath"]
        for c in by(rendered, "Deployment", "starforge-control")["spec"]["template"]["spec"]["containers"]
        for m in c["volumeMounts"]
        if m["name"] == "blobs"
    )
    assert str(control.blob_dir) == blobs

    kuberay = load_service_config(
        "kuberay", KubeRayConfig, config_file(rendered, "starforge-executor-kuberay", "executor.yaml", tmp_path), {}
    ).kuberay
    # RayJobs go where the Role lets the executor create them, with objects of the render.
    assert kuberay.namespace == by(rendered, "Role", "starforge-executor-kuberay")["metadata"]["namespace"]
    assert by(rendered, "ServiceAccount", kuberay.service_account)["metadata"]["namespace"] == kuberay.namespace
    out = by(rendered, "PersistentVolumeClaim", kuberay.out_volume_claim)
    assert out["metadata"]["namespace"] == kuberay.namespace
    assert out["spec"]["accessModes"] == ["ReadWriteMany"]
    assert kuberay.use_secret_for_token

    agent = load_service_config(
        "agent", AgentConfig, config_file(rendered, "starforge-executor-agent", "executor.yaml", tmp_path), {}
    ).agent
    assert agent.fleet in [f.name for f in control.fleets if f.kind == "agent"]

    node_env = {"STARFORGE_FORGELET_NAME": "gpu-07", "STARFORGE_FORGELET_ADVERTISE": "10.0.0.7:7072"}
    node = forgelet_config.load(config_file(rendered, "starforge-forgelet", "forgelet.yaml", tmp_path), node_env)
    assert node.fleet == agent.fleet
    forgelet = by(rendered, "DaemonSet", "starforge-forgelet")["spec"]["template"]["spec"]
    state = next(v for v in forgelet["volumes"] if v["name"] == "state")
    # The node's docker mounts state_dir's subdirectories: the same path on the host and in the pod.
    assert state["hostPath"]["path"] == str(node.state_dir)


def test_envoy_config_is_the_generated_tls_variant() -> None:
    assert (KUBE / "base" / "starforge" / "envoy" / "envoy.yaml").read_text() == (
        ROOT / "deploy" / "envoy-tls.yaml"
    ).read_text()


# -- the checker fails on broken objects ----------------------------------------------------


def _deployment() -> dict[str, Any]:
    return copy.deepcopy(by(render(str(KUBE / "base")), "Deployment", "starforge-control"))


def test_the_schema_check_refuses_unknown_fields_wrong_types_and_missing_fields() -> None:
    good = _deployment()
    assert check_builtin(good) == []

    unknown = copy.deepcopy(good)
    unknown["spec"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"
    assert check_builtin(unknown) == [
        "Deployment/starforge-control: spec.template.spec.containers[0].imagePullPolcy: unknown field (not in V1Container)"
    ]

    python_name = copy.deepcopy(good)  # the client's own attribute name is not the API's
    python_name["spec"]["template"]["spec"]["service_account_name"] = "x"
    assert "spec.template.spec.service_account_name: unknown field" in check_builtin(python_name)[0]

    wrong_type = copy.deepcopy(good)
    wrong_type["spec"]["replicas"] = "2"
    wrong_type["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = True
    assert check_builtin(wrong_type) == [
        "Deployment/starforge-control: spec.replicas: expected int, got str '2'",
        "Deployment/starforge-control: spec.template.spec.containers[0].ports[0].containerPort: expected int, got bool True",
    ]

    missing = copy.deepcopy(good)
    del missing["spec"]["template"]["spec"]["containers"][0]["name"]
    del missing["spec"]["selector"]
    assert check_builtin(missing) == [
        "Deployment/starforge-control: spec.template.spec.containers[0].name: required field missing (V1Container)",
        "Deployment/starforge-control: spec.selector: required field missing (V1DeploymentSpec)",
    ]

    not_a_list = copy.deepcopy(good)
    not_a_list["spec"]["template"]["spec"]["containers"][0]["command"] = "starforge-control"
    bad_quantity = copy.deepcopy(good)
    bad_quantity["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] = "8 GB"
    assert "command: expected a list, got str" in check_builtin(not_a_list)[0]
    assert "resources.limits.memory: '8 GB' is not a quantity" in check_builtin(bad_quantity)[0]
    assert model_for("ray.io/v1", "RayJob") is None


def test_the_reference_check_finds_dangling_references() -> None:
    objs = render(str(KUBE / "base"))
    assert cross_references(objs, EXTERNAL_SECRETS) == []
    broken = copy.deepcopy(objs)
    control = by(broken, "Deployment", "starforge-control")["spec"]["template"]["spec"]
    main = control["containers"][0]
    main["readinessProbe"]["httpGet"]["port"] = "healthz"
    main["env"][0]["valueFrom"]["secretKeyRef"]["key"] = "database-password"
    control["serviceAccountName"] = "nobody"
    next(v for v in control["volumes"] if v["name"] == "blobs")["persistentVolumeClaim"]["claimName"] = "gone"
    next(v for v in control["volumes"] if v["name"] == "config")["configMap"]["name"] = "starforge-control"
    by(broken, "Service", "starforge-executor-agent")["spec"]["selector"] = {"app.kubernetes.io/name": "agent"}
    by(broken, "RoleBinding", "starforge-executor-kuberay")["roleRef"]["name"] = "admin-ish"
    by(broken, "Service", "starforge-envoy")["spec"]["ports"][0]["targetPort"] = "http"
    by(broken, "RoleBinding", "starforge-executor-kuberay")["subjects"][0]["namespace"] = "starforge-jobs"
    policy = by(broken, "NetworkPolicy", "starforge-executor-kuberay")["spec"]
    policy["ingress"][0]["from"][0]["podSelector"] = {"matchLabels": {"app.kubernetes.io/name": "control"}}
    policy["ingress"][0]["ports"][0]["port"] = "grcp"
    errors = cross_references(broken, EXTERNAL_SECRETS)
    assert sorted(errors) == sorted(
        [
            "Deployment/starforge-control: serviceAccountName 'nobody' is not in the render",
            "Deployment/starforge-control: volume config: ConfigMap 'starforge-control' is not in the render",
            "Deployment/starforge-control: volume blobs: PersistentVolumeClaim 'gone' is not in the render",
            "Deployment/starforge-control: container control: env STARFORGE_DATABASE_URL: Secret 'starforge-secrets' has no key 'database-password'",
            "Deployment/starforge-control: container control: readinessProbe.httpGet.port 'healthz' is not a named port of the container",
            "RoleBinding/starforge-executor-kuberay: roleRef Role 'admin-ish' is not in the render",
            "RoleBinding/starforge-executor-kuberay: subject ServiceAccount "
            "starforge-jobs/starforge-executor-kuberay is not in the render",
            "Service/starforge-executor-agent: selector {'app.kubernetes.io/name': 'agent'} selects no pod template",
            "Service/starforge-envoy: targetPort 'http' is not a named port of Deployment/starforge-envoy",
            "NetworkPolicy/starforge-executor-kuberay: ingress from podSelector "
            "{'matchLabels': {'app.kubernetes.io/name': 'control'}} selects no pod template",
            "NetworkPolicy/starforge-executor-kuberay: port 'grcp' is not a named port of "
            "Deployment/starforge-executor-kuberay",
        ]
    )


# -- custom resources: the API server's own schema ------------------------------------------


@pytest.mark.kube
def test_custom_resources_are_checked_by_the_api_server(kube: Kube, tmp_path: pathlib.Path) -> None:
    """The RayJob the deployed kuberay executor builds (from the render's config file) passes a
    strict server-side dry-run; an unknown field and a wrong type are refused by the server."""
    objs = render(str(KUBE / "base"))
    path = config_file(objs, "starforge-executor-kuberay", "executor.yaml", tmp_path)
    cfg = load_service_config("kuberay", KubeRayConfig, path, {}).kuberay
    rayjob = builder.build(request(), cfg).manifest
    assert (
        rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["serviceAccountName"] == "starforge-job"
    )
    assert dry_run_custom(kube.api, rayjob, cfg.namespace) == []
    listed = kube.custom.list_namespaced_custom_object("ray.io", "v1", cfg.namespace, "rayjobs")
    assert isinstance(listed, dict) and listed["items"] == []  # a dry-run stores nothing

    unknown = copy.deepcopy(rayjob)
    unknown["spec"]["submisionMode"] = "K8sJobMode"
    (error,) = dry_run_custom(kube.api, unknown, cfg.namespace)
    assert "(400)" in error and 'unknown field \\"spec.submisionMode\\"' in error

    wrong_type = copy.deepcopy(rayjob)
    wrong_type["spec"]["backoffLimit"] = "zero"
    (error,) = dry_run_custom(kube.api, wrong_type, cfg.namespace)
    assert "(422)" in error and "spec.backoffLimit" in error

    assert dry_run_custom(
        kube.api, {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}, "x"
    ) == ["Widget/w: no CustomResourceDefinition serves example.com/v1 Widget"]
    assert yaml.safe_dump(rayjob)  # the manifest is plain data
