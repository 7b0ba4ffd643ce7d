"""Checks rendered Kubernetes objects against the Kubernetes API's schemas, and their references.

- Built-in kinds are walked through the `kubernetes` client's generated models (`openapi_types`
  for each field's type, `attribute_map` for its JSON name, the pydantic field's `is_required()`):
  an unknown field, a value of the wrong type or a missing required field is an error with its
  path (`Deployment/x: spec.template.spec.containers[0].bogus: unknown field`). Only the JSON
  names count: the client also accepts its Python names, the API server does not.
- Custom resources are sent to a real API server as a server-side dry-run with strict field
  validation (`dry_run_custom`).
- `cross_references` checks what the API server does not: every ConfigMap, Secret, PVC and
  ServiceAccount a pod names exists (or is declared external), every probe and Service port
  name exists on the container, every selector selects something.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import kubernetes.client as k8s
import yaml
from kubernetes.client.exceptions import ApiException

# API groups whose kinds have models in the kubernetes client ("" is the core group).
BUILTIN_GROUPS = frozenset(
    {
        "",
        "apps",
        "batch",
        "policy",
        "autoscaling",
        "rbac.authorization.k8s.io",
        "networking.k8s.io",
        "storage.k8s.io",
        "scheduling.k8s.io",
        "node.k8s.io",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "apiextensions.k8s.io",
        "admissionregistration.k8s.io",
        "certificates.k8s.io",
    }
)
# Kubernetes resource quantities ("8", "500m", "64Gi", "1.5e3").
QUANTITY = re.compile(r"^[+-]?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_LIST = re.compile(r"^List\[(.+)\]$")
_DICT = re.compile(r"^Dict\[str, (.+)\]$")
WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job")


def render(kustomization: str) -> list[dict[str, Any]]:
    """`kubectl kustomize <dir>` (offline) as a list of objects."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise AssertionError("kubectl is not on PATH: `make system-deps` installs it (kubectl kustomize renders)")
    proc = subprocess.run([kubectl, "kustomize", kustomization], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"kubectl kustomize {kustomization} failed: {proc.stderr.strip()}")
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def split_api_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


def model_for(api_version: str, kind: str) -> type[Any] | None:
    """The client's model for a built-in kind (V1Deployment for apps/v1 Deployment); None otherwise."""
    group, version = split_api_version(api_version)
    if group not in BUILTIN_GROUPS:
        return None
    model = getattr(k8s, f"{version[:1].upper()}{version[1:]}{kind}", None)
    if not isinstance(model, type) or "kind" not in getattr(model, "openapi_types", {}):
        return None
    return model


def namespace_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "")


def name_of(obj: Mapping[str, Any]) -> str:
    return f"{obj.get('kind')}/{(obj.get('metadata') or {}).get('name')}"


def check_builtin(obj: Mapping[str, Any]) -> list[str]:
    """Schema errors of one built-in object (a list of `Kind/name: path: why`); [] when valid."""
    model = model_for(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
    if model is None:
        return [f"{name_of(obj)}: {obj.get('apiVersion')} {obj.get('kind')} is not a built-in kind"]
    return [f"{name_of(obj)}: {e}" for e in _check_model(obj, model, "")]


def _check_model(value: Any, model: type[Any], path: str) -> Iterator[str]:
    where = path or "(object)"
    if not isinstance(value, Mapping):
        yield f"{where}: expected an object ({model.__name__}), got {type(value).__name__}"
        return
    by_json = {json: attr for attr, json in model.attribute_map.items()}
    for key, item in value.items():
        sub = f"{path}.{key}" if path else str(key)
        attr = by_json.get(key)
        if attr is None:
            yield f"{sub}: unknown field (not in {model.__name__})"
            continue
        if item is None:
            continue  # null is read as the field's absence
        yield from _check_type(item, model.openapi_types[attr], sub)
    fields = getattr(model, "model_fields", {})
    for attr, json in model.attribute_map.items():
        field = fields.get(attr)
        if field is not None and field.is_required() and value.get(json) is None:
            yield f"{path + '.' if path else ''}{json}: required field missing ({model.__name__})"
    if model is k8s.V1ResourceRequirements:
        for section in ("limits", "requests"):
            for res, qty in (value.get(section) or {}).items():
                if isinstance(qty, str) and not QUANTITY.match(qty):
                    yield f"{path}.{section}.{res}: {qty!r} is not a quantity"


def _check_type(value: Any, type_name: str, path: str) -> Iterator[str]:
    scalar = {"str": (str,), "bytes": (str,), "datetime": (str,), "int": (int,), "float": (int, float), "bool": (bool,)}
    if type_name in scalar:
        ok = isinstance(value, scalar[type_name]) and not (type_name in ("int", "float") and isinstance(value, bool))
        if not ok:
            yield f"{path}: expected {type_name}, got {type(value).__name__} {value!r}"
        return
    if type_name == "object":  # IntOrString, RawExtension: any JSON value
        return
    if m := _LIST.match(type_name):
        if not isinstance(value, list):
            yield f"{path}: expected a list, got {type(value).__name__}"
            return
        for i, item in enumerate(value):
            yield from _check_type(item, m.group(1), f"{path}[{i}]")
        return
    if m := _DICT.match(type_name):
        if not isinstance(value, Mapping):
            yield f"{path}: expected a map, got {type(value).__name__}"
            return
        for k, item in value.items():
            if not isinstance(k, str):
                yield f"{path}: key {k!r} is not a string"
            yield from _check_type(item, m.group(1), f"{path}.{k}")
        return
    model = getattr(k8s, type_name, None)
    if not isinstance(model, type):
        yield f"{path}: the client has no model {type_name}"
        return
    yield from _check_model(value, model, path)


def dry_run_custom(api: k8s.ApiClient, obj: Mapping[str, Any], namespace: str) -> list[str]:
    """Create a custom resource as a server-side dry-run with strict field validation: the API
    server's own schema check (unknown fields, types, CEL rules). Errors as for check_builtin."""
    group, version = split_api_version(str(obj.get("apiVersion", "")))
    kind = str(obj.get("kind", ""))
    crds = k8s.ApiextensionsV1Api(api).list_custom_resource_definition().items
    crd = next((c for c in crds if c.spec.group == group and c.spec.names.kind == kind), None)
    if crd is None:
        return [f"{name_of(obj)}: no CustomResourceDefinition serves {group}/{version} {kind}"]
    custom = k8s.CustomObjectsApi(api)
    try:
        if crd.spec.scope == "Namespaced":
            custom.create_namespaced_custom_object(
                group, version, namespace, crd.spec.names.plural, dict(obj), dry_run="All", field_validation="Strict"
            )
        else:
            custom.create_cluster_custom_object(
                group, version, crd.spec.names.plural, dict(obj), dry_run="All", field_validation="Strict"
            )
    except ApiException as exc:
        return [f"{name_of(obj)}: the API server refused it ({exc.status}): {exc.body}"]
    return []


# -- references -------------------------------------------------------------------------------


def pod_specs(obj: Mapping[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(pod spec, pod labels) of a workload or Pod."""
    if obj.get("kind") == "Pod":
        yield obj.get("spec") or {}, (obj.get("metadata") or {}).get("labels") or {}
    elif obj.get("kind") in WORKLOADS or obj.get("kind") == "CronJob":
        spec = obj.get("spec") or {}
        if obj.get("kind") == "CronJob":
            spec = (spec.get("jobTemplate") or {}).get("spec") or {}
        template = spec.get("template") or {}
        yield template.get("spec") or {}, (template.get("metadata") or {}).get("labels") or {}


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A LabelSelector (matchLabels, matchExpressions In/NotIn/Exists/DoesNotExist) on labels."""
    if not selector:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _containers(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    return list(spec.get("initContainers") or []) + list(spec.get("containers") or [])


def cross_references(objs: Iterable[Mapping[str, Any]], external_secrets: Mapping[str, Iterable[str]]) -> list[str]:
    """Errors for references that point at nothing. `external_secrets`: Secrets the install
    expects to exist (never rendered), by name, with their keys."""
    objs = list(objs)
    index: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for o in objs:
        index[(str(o.get("kind")), namespace_of(o), str((o.get("metadata") or {}).get("name")))] = o
    errs: list[str] = []

    def find(kind: str, namespace: str, name: object) -> Mapping[str, Any] | None:
        return index.get((kind, namespace, str(name)))

    def config_keys(ns: str, name: str) -> set[str] | None:
        cm = find("ConfigMap", ns, name)
        return None if cm is None else set(cm.get("data") or {}) | set(cm.get("binaryData") or {})

    def secret_keys(ns: str, name: str) -> set[str] | None:
        if name in external_secrets:
            return set(external_secrets[name])
        s = find("Secret", ns, name)
        return None if s is None else set(s.get("data") or {}) | set(s.get("stringData") or {})

    def ref(where: str, kind: str, name: str | None, key: str | None = None, optional: bool = False) -> None:
        ns = where_ns[0]
        keys = config_keys(ns, str(name)) if kind == "ConfigMap" else secret_keys(ns, str(name))
        if keys is None:
            if not optional:
                errs.append(f"{where}: {kind} {name!r} is not in the render")
        elif key is not None and key not in keys:
            errs.append(f"{where}: {kind} {name!r} has no key {key!r}")

    where_ns = [""]  # the namespace `ref` resolves in: the pod's
    pods: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = []
    for o in objs:
        for spec, labels in pod_specs(o):
            where = name_of(o)
            where_ns[0] = namespace_of(o)
            pods.append((namespace_of(o), where, spec, labels))
            if o.get("kind") in WORKLOADS and not selects((o.get("spec") or {}).get("selector") or {}, labels):
                errs.append(f"{where}: spec.selector does not select the pod template's labels")
            sa = spec.get("serviceAccountName")
            if sa and find("ServiceAccount", where_ns[0], sa) is None:
                errs.append(f"{where}: serviceAccountName {sa!r} is not in the render")
            volumes = {v.get("name"): v for v in spec.get("volumes") or []}
            for vname, v in volumes.items():
                vw = f"{where}: volume {vname}"
                if "configMap" in v:
                    cm = v["configMap"]
                    for item in cm.get("items") or [{"key": None}]:
                        ref(vw, "ConfigMap", cm.get("name"), item.get("key"), bool(cm.get("optional")))
                if "secret" in v:
                    sec = v["secret"]
                    for item in sec.get("items") or [{"key": None}]:
                        ref(vw, "Secret", sec.get("secretName"), item.get("key"), bool(sec.get("optional")))
                if "persistentVolumeClaim" in v:
                    claim = v["persistentVolumeClaim"].get("claimName")
                    if find("PersistentVolumeClaim", where_ns[0], claim) is None:
                        errs.append(f"{vw}: PersistentVolumeClaim {claim!r} is not in the render")
            for c in _containers(spec):
                cw = f"{where}: container {c.get('name')}"
                port_names = {p.get("name") for p in c.get("ports") or [] if p.get("name")}
                port_numbers = {p.get("containerPort") for p in c.get("ports") or []}
                for m in c.get("volumeMounts") or []:
                    if m.get("name") not in volumes:
                        errs.append(f"{cw}: volumeMount {m.get('name')!r} names no volume of the pod")
                for e in c.get("env") or []:
                    src = e.get("valueFrom") or {}
                    if "configMapKeyRef" in src:
                        r = src["configMapKeyRef"]
                        ref(
                            f"{cw}: env {e.get('name')}",
                            "ConfigMap",
                            r.get("name"),
                            r.get("key"),
                            bool(r.get("optional")),
                        )
                    if "secretKeyRef" in src:
                        r = src["secretKeyRef"]
                        ref(
                            f"{cw}: env {e.get('name')}", "Secret", r.get("name"), r.get("key"), bool(r.get("optional"))
                        )
                for e in c.get("envFrom") or []:
                    if "configMapRef" in e:
                        ref(
                            f"{cw}: envFrom",
                            "ConfigMap",
                            e["configMapRef"].get("name"),
                            None,
                            bool(e["configMapRef"].get("optional")),
                        )
                    if "secretRef" in e:
                        ref(
                            f"{cw}: envFrom",
                            "Secret",
                            e["secretRef"].get("name"),
                            None,
                            bool(e["secretRef"].get("optional")),
                        )
                for probe_name in ("startupProbe", "readinessProbe", "livenessProbe"):
                    probe = c.get(probe_name) or {}
                    for handler in ("httpGet", "tcpSocket", "grpc"):
                        if handler not in probe:
                            continue
                        port = probe[handler].get("port")
                        if isinstance(port, str) and port not in port_names:
                            errs.append(
                                f"{cw}: {probe_name}.{handler}.port {port!r} is not a named port of the container"
                            )
                        if isinstance(port, int) and port not in port_numbers:
                            errs.append(f"{cw}: {probe_name}.{handler}.port {port} is not a port of the container")
    for o in objs:
        where = name_of(o)
        spec = o.get("spec") or {}
        ns = namespace_of(o)
        here = [(w, s, labels) for pod_ns, w, s, labels in pods if pod_ns == ns]
        if o.get("kind") == "Service" and spec.get("selector"):
            chosen = [(w, s) for w, s, labels in here if selects({"matchLabels": spec["selector"]}, labels)]
            if not chosen:
                errs.append(f"{where}: selector {spec['selector']} selects no pod template")
            for p in spec.get("ports") or []:
                target = p.get("targetPort")
                if isinstance(target, str):
                    for w, s in chosen:
                        names = {q.get("name") for c in s.get("containers") or [] for q in c.get("ports") or []}
                        if target not in names:
                            errs.append(f"{where}: targetPort {target!r} is not a named port of {w}")
        if o.get("kind") == "PodDisruptionBudget" and not any(
            selects(spec.get("selector") or {}, labels) for _, _, labels in here
        ):
            errs.append(f"{where}: selector selects no pod template")
        if o.get("kind") == "NetworkPolicy":
            targets = [(w, s) for w, s, labels in here if selects(spec.get("podSelector") or {}, labels)]
            if not targets:
                errs.append(f"{where}: podSelector selects no pod template")
            for rule in spec.get("ingress") or []:
                for peer in rule.get("from") or []:
                    chosen = peer.get("podSelector")
                    if chosen and "namespaceSelector" not in peer and not any(selects(chosen, lb) for _, _, lb in here):
                        errs.append(f"{where}: ingress from podSelector {chosen} selects no pod template")
                for port in rule.get("ports") or []:
                    named = port.get("port")
                    for w, s in targets:
                        names = {q.get("name") for c in s.get("containers") or [] for q in c.get("ports") or []}
                        if isinstance(named, str) and named not in names:
                            errs.append(f"{where}: port {named!r} is not a named port of {w}")
        if o.get("kind") == "RoleBinding":
            role = (o.get("roleRef") or {}).get("name")
            if (o.get("roleRef") or {}).get("kind") == "Role" and find("Role", ns, role) is None:
                errs.append(f"{where}: roleRef Role {role!r} is not in the render")
            for s in o.get("subjects") or []:
                sa_ns = str(s.get("namespace") or ns)
                if s.get("kind") == "ServiceAccount" and find("ServiceAccount", sa_ns, s.get("name")) is None:
                    errs.append(f"{where}: subject ServiceAccount {sa_ns}/{s.get('name')} is not in the render")
    return errs
