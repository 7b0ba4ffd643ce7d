"""Names and labels, the `kuberay:` config section, and static checks of the in-pod fetch script."""

from __future__ import annotations

import ast
import pathlib
import re
import sys

import pytest

from common.config import ConfigError
from executor_svc.config import load_service_config
from executor_svc.kuberay import KIND, builder, names
from executor_svc.kuberay.config import KubeRayConfig, SeriesConfig
from executor_svc.registry import get_kind

DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


@pytest.mark.parametrize(
    "attempt_id",
    ["j0123456789abc.1", "j0123456789abc.12", "J0123456789ABC.1", "weird_id/with spaces.3", "j" + "x" * 80 + ".7"],
)
def test_rayjob_names_are_kuberay_valid(attempt_id: str) -> None:
    name = names.rayjob_name(attempt_id)
    assert len(name) <= 47
    assert DNS_1035.match(name)
    assert names.rayjob_name(attempt_id) == name


def test_plain_attempt_ids_map_readably_and_odd_ones_stay_unique() -> None:
    assert names.rayjob_name("j0123456789abc.1") == "sf-j0123456789abc-1"
    assert names.rayjob_name("J0123456789ABC.1") != names.rayjob_name("j0123456789abc.1")
    assert names.rayjob_name("a.b.1") != names.rayjob_name("a-b.1")


def test_label_values() -> None:
    assert names.label_value("j0123456789abc.1") == "j0123456789abc.1"
    assert names.label_value("") == ""
    for raw in ("@tester/lab", "x" * 100, "-a-", "///"):
        v = names.label_value(raw)
        assert len(v) <= 63
        assert re.match(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$", v), v
    assert names.label_value("@a/b") != names.label_value("@a_b")


def test_label_keys() -> None:
    assert names.label_key("starforge.dev/job-id") == "starforge.dev/job-id"
    assert names.label_key("Bad Prefix!/na me") == "bad-prefix/na_me-" + names.label_value("na me").rsplit("-", 1)[1]


def test_registered_kind_loads_its_config(tmp_path: pathlib.Path) -> None:
    assert get_kind("kuberay") is KIND
    path = tmp_path / "executor.yaml"
    path.write_text(
        "listen: 127.0.0.1:0\n"
        "kuberay:\n"
        "  kubeconfig: /etc/kubeconfig\n"
        "  namespace: training\n"
        "  out_volume_claim: starforge-out\n"
        "  inventory:\n"
        "    - series: h200\n"
        "      nodes: 4\n"
        "      gpus_per_node: 8\n"
        "      node_selector: {nvidia.com/gpu.product: NVIDIA-H200}\n"
        "      tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]\n"
    )
    cfg = load_service_config("kuberay", KIND.config_class, path, {"STARFORGE_EXECUTOR_KUBERAY__NAMESPACE": "ml"})
    k: KubeRayConfig = cfg.kuberay
    assert k.namespace == "ml"
    assert k.series("h200") == SeriesConfig(
        series="h200",
        nodes=4,
        gpus_per_node=8,
        node_selector={"nvidia.com/gpu.product": "NVIDIA-H200"},
        tolerations=k.inventory[0].tolerations,
    )
    assert k.inventory[0].tolerations[0].to_k8s() == {
        "operator": "Exists",
        "key": "nvidia.com/gpu",
        "effect": "NoSchedule",
    }


@pytest.mark.parametrize(
    ("yaml_text", "match"),
    [
        ("kuberay:\n  namspace: x\n", "did you mean namespace"),
        ("kuberay:\n  namespace: Not_Valid\n", "DNS-1123"),
        ("kuberay:\n  image_pull_policy: Sometimes\n", "image_pull_policy"),
        ("kuberay:\n  inventory: [{series: h200, cpu: lots}]\n", "quantity"),
        ("kuberay:\n  inventory: [{series: a}, {series: a}]\n", "listed once"),
        ("kuberay:\n  inventory: []\n", "at least one series"),
        ("kuberay:\n  ray_version: latest\n", "Ray version"),
        ("kuberay:\n  extra_labels: {'a b': c}\n", "extra_labels"),
    ],
)
def test_config_refusals(tmp_path: pathlib.Path, yaml_text: str, match: str) -> None:
    path = tmp_path / "executor.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError, match=match):
        load_service_config("kuberay", KubeRayConfig, path, {})


def test_fetch_script_is_stdlib_only_and_survives_kubernetes_expansion() -> None:
    source = builder.fetch_source()
    assert "$" not in source, "Kubernetes expands $(VAR) in container commands"
    tree = ast.parse(source)
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")])
    }
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported - set(sys.stdlib_module_names)
    compile(source, "<fetch>", "exec")
    assert len(source) < 16_000
