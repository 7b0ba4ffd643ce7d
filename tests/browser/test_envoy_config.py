"""deploy/envoy.yaml (the envoy image's config) stays what control/envoy.py renders, and envoy
accepts it. No browser needed; it lives here with the rest of the console's tests."""

from __future__ import annotations

import pathlib
import subprocess

from control.envoy import binary
from deploy import envoy_config
from tests.security.tls_support import make_pki


def test_deploy_envoy_yaml_is_in_sync() -> None:
    assert envoy_config.main(["--check"]) == 0, "deploy/envoy.yaml is stale: run `python -m deploy.envoy_config`"


def test_deploy_envoy_yaml_routes_grpc_web_to_the_control_service() -> None:
    doc = envoy_config.config()
    clusters = {c["name"]: c for c in doc["static_resources"]["clusters"]}
    assert clusters["grpc"]["type"] == "STRICT_DNS"  # a service name, re-resolved
    hcm = doc["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    assert [f["name"] for f in hcm["http_filters"]] == ["envoy.filters.http.grpc_web", "envoy.filters.http.router"]


def test_envoy_accepts_deploy_envoy_yaml() -> None:
    r = subprocess.run(
        [str(binary()), "--mode", "validate", "-c", str(envoy_config.PATH)], capture_output=True, text=True, check=False
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_envoy_accepts_the_compose_configs(tmp_path: pathlib.Path) -> None:
    """deploy/compose/envoy.yaml as it is; envoy-tls.yaml with a real certificate at its paths."""
    pki = make_pki(tmp_path / "pki")
    tls = envoy_config.compose_text(envoy_config.COMPOSE_TLS)
    tls = tls.replace(envoy_config.COMPOSE_TLS.cert_file, str(pki.leaf.cert))
    tls = tls.replace(envoy_config.COMPOSE_TLS.key_file, str(pki.leaf.key))
    (tmp_path / "envoy-tls.yaml").write_text(tls)
    for path in (envoy_config.COMPOSE_PATH, tmp_path / "envoy-tls.yaml"):
        r = subprocess.run(
            [str(binary()), "--mode", "validate", "-c", str(path)], capture_output=True, text=True, check=False
        )
        assert r.returncode == 0, f"{path}: {r.stdout}{r.stderr}"


def test_compose_config_balances_health_checked_replicas() -> None:
    doc = envoy_config.compose_config(front_tls=envoy_config.COMPOSE_TLS, listen="0.0.0.0:8443")
    clusters = {c["name"]: c for c in doc["static_resources"]["clusters"]}
    for name, check in (("grpc", "grpc_health_check"), ("http", "http_health_check")):
        endpoints = clusters[name]["load_assignment"]["endpoints"][0]["lb_endpoints"]
        assert len(endpoints) == 2, name
        (health,) = clusters[name]["health_checks"]
        assert check in health
        assert "transport_socket" not in clusters[name]  # the replicas listen on loopback
    listeners = {ln["name"]: ln for ln in doc["static_resources"]["listeners"]}
    assert "transport_socket" in listeners["console"]["filter_chains"][0]
    jobs = listeners["jobs"]
    assert jobs["address"]["socket_address"]["address"] == "127.0.0.1"
    assert "transport_socket" not in jobs["filter_chains"][0]
