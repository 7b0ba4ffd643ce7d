"""deploy/envoy.yaml (the envoy image's config) stays what control/envoy.py renders, and envoy
accepts it. No browser needed; it lives here with the rest of the console's tests."""

from __future__ import annotations

import subprocess

from control.envoy import binary
from deploy import envoy_config


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
