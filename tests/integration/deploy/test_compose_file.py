"""deploy/compose/compose.yaml as Compose v2 reads it (`docker compose config`, no engine needed):
the required token is required, every service is on the host network, the replicas share the
blob volume, the executor's state dir is the same path on both sides, the TLS override swaps
envoy's config, and the configurations it hands the services load as the services load them."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
from typing import Any

import pytest

from control import config as control_config
from executor_svc.config import load_service_config
from executor_svc.registry import get_kind
from tests.integration.deploy.compose_support import compose_binary

DEPLOY = pathlib.Path(__file__).resolve().parents[3] / "deploy" / "compose"
TOKEN = "t0ken-for-the-config-test-0123456789"


def config(
    *files: str, env: dict[str, str] | None = None, profiles: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    args = [str(compose_binary()), "-p", "sfcheck"]
    for f in files:
        args += ["-f", str(DEPLOY / f)]
    for p in profiles:
        args += ["--profile", p]
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SF_", "DOCKER_", "COMPOSE_"))}
    return subprocess.run(
        [*args, "config", "--format", "json"],
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def doc(*files: str, env: dict[str, str] | None = None, profiles: tuple[str, ...] = ()) -> dict[str, Any]:
    r = config(*files, env={"SF_EXECUTOR_TOKEN": TOKEN, **(env or {})}, profiles=profiles)
    assert r.returncode == 0, r.stderr
    loaded: dict[str, Any] = json.loads(r.stdout)
    return loaded


def mounts(service: dict[str, Any]) -> dict[str, str]:
    return {v["target"]: v["source"] for v in service.get("volumes", [])}


def test_the_executor_token_is_required() -> None:
    r = config("compose.yaml")
    assert r.returncode != 0
    assert "SF_EXECUTOR_TOKEN" in r.stderr


def test_services_share_what_replicas_must_share() -> None:
    d = doc("compose.yaml", env={"SF_EXECUTOR_STATE_DIR": "/srv/sf/executor"})
    services = d["services"]
    assert set(services) == {"control-a", "control-b", "executor", "envoy"}  # postgres: a profile
    assert {s["network_mode"] for s in services.values()} == {"host"}
    a, b = services["control-a"], services["control-b"]
    assert mounts(a)["/var/lib/starforge/blobs"] == mounts(b)["/var/lib/starforge/blobs"] == "blobs"
    assert mounts(a)["/var/lib/starforge/console"] != mounts(b)["/var/lib/starforge/console"]
    assert a["environment"]["STARFORGE_LISTEN"] != b["environment"]["STARFORGE_LISTEN"]
    assert "STARFORGE_BOOTSTRAP_ADMIN" in a["environment"] and "STARFORGE_BOOTSTRAP_ADMIN" not in b["environment"]
    assert b["depends_on"]["control-a"]["condition"] == "service_healthy"
    assert mounts(services["executor"])["/srv/sf/executor"] == "/srv/sf/executor"
    assert services["envoy"]["image"].startswith("envoyproxy/envoy:")
    assert mounts(services["envoy"])["/etc/envoy/envoy.yaml"] == str(DEPLOY / "envoy.yaml")
    with_db = doc("compose.yaml", env={"SF_POSTGRES_PASSWORD": "pw"}, profiles=("postgres",))
    postgres = with_db["services"]["postgres"]
    assert with_db["services"]["control-a"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    # jobs share the host's network: the database on loopback still wants its password
    assert postgres["environment"]["POSTGRES_PASSWORD"] == "pw"
    assert postgres["environment"]["POSTGRES_HOST_AUTH_METHOD"] == "scram-sha-256"
    assert "postgresql+psycopg://starforge:pw@127.0.0.1:5432/" in with_db["configs"]["control"]["content"]


def test_tls_override_serves_the_front_door_with_tls() -> None:
    envoy = doc("compose.yaml", "compose.tls.yaml")["services"]["envoy"]
    assert mounts(envoy)["/etc/envoy/envoy.yaml"] == str(DEPLOY / "envoy-tls.yaml")
    assert mounts(envoy)["/etc/envoy/tls"] == str(DEPLOY / "tls")


@pytest.mark.parametrize("replica", ["control-a", "control-b"])
def test_the_configs_load_as_the_services_load_them(tmp_path: pathlib.Path, replica: str) -> None:
    d = doc("compose.yaml", env={"SF_IMAGE_ALLOWLIST": "registry.example.org/team"})
    service = d["services"][replica]
    path = tmp_path / "control.yaml"
    path.write_text(d["configs"]["control"]["content"])
    cfg = control_config.load(path, service["environment"])
    assert cfg.listen == service["environment"]["STARFORGE_LISTEN"]
    assert cfg.public_address == "127.0.0.1:8080"  # envoy: whichever replica is up
    assert str(cfg.blob_dir) == "/var/lib/starforge/blobs"
    assert cfg.database_url.startswith("postgresql+psycopg://")
    assert cfg.image_allowlist == ["registry.example.org/team"]
    (fleet,) = cfg.fleets
    assert (fleet.kind, fleet.address, fleet.token) == ("local", "127.0.0.1:7071", TOKEN)
    executor = tmp_path / "executor.yaml"
    executor.write_text(d["configs"]["executor"]["content"])
    kind = get_kind("local")
    ecfg = load_service_config(kind.name, kind.config_class, executor, {})
    assert (ecfg.listen, ecfg.token, ecfg.local.runtime) == ("127.0.0.1:7071", TOKEN, "docker")
    assert ecfg.local.docker.base_url == "unix:///var/run/docker.sock"
