"""Where a job's image comes from: the resolution order, the runtime registry file, requires_image,
the host runtime a fleet declares, and the tag warning of production submissions."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest
from starforge_api.job.v1 import job_pb2, job_spec_pb2

from common import errors
from common.config import ConfigError
from control import admission, images
from control.config import ControlConfig, FleetConfig, load
from recipes.catalog import load_catalog

CATALOG = load_catalog()
TRL = CATALOG.recipes["trl/sft"]
CUSTOM = CATALOG.recipes["custom/custom"]
DIGEST = "sha256:" + "b" * 64


def _registry(tmp_path: pathlib.Path, text: str) -> pathlib.Path:
    path = tmp_path / "runtimes.yaml"
    path.write_text(text)
    return path


def _resolve(
    recipe: Any, cfg: ControlConfig, *, image: str = "", config: dict[str, Any] | None = None, version: str = ""
) -> images.Resolved:
    spec = job_spec_pb2.JobSpec(image=image, framework_version=version, config_json=json.dumps(config or {}))
    runtime = admission.resolve_runtime(spec, recipe)
    return admission.resolve_image(spec, recipe, runtime, config or {}, cfg)


def test_the_order_submission_console_default_registry_catalog(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FORGE_IMAGE_TRL", raising=False)
    registry = _registry(tmp_path, 'runtimes:\n  trl:\n    "1.15.0": registry.local/trl:1.15.0-site\n')
    allow = ["registry.local", "registry.starforge.dev/runtimes"]
    cfg = ControlConfig(image_allowlist=allow, runtime_registry_file=registry)
    # nothing configured for 1.16.0: the catalog
    r = _resolve(TRL, cfg)
    assert (r.image, r.source) == (
        "registry.starforge.dev/runtimes/trl:1.16.0-py3.11-cu128",
        job_pb2.IMAGE_SOURCE_CATALOG,
    )
    # the registry file names 1.15.0
    r = _resolve(TRL, cfg, version="1.15.0")
    assert (r.image, r.source) == ("registry.local/trl:1.15.0-site", job_pb2.IMAGE_SOURCE_RUNTIME_REGISTRY)
    assert r.detail == f"{registry}: runtimes.trl.1.15.0"
    # the console's framework default wins over the registry file
    cfg = ControlConfig(
        image_allowlist=allow, runtime_registry_file=registry, default_images={"trl": "registry.local/t:d"}
    )
    r = _resolve(TRL, cfg, version="1.15.0")
    assert (r.image, r.source, r.detail) == (
        "registry.local/t:d",
        job_pb2.IMAGE_SOURCE_CONSOLE_DEFAULT,
        "default_images.trl of the console configuration",
    )
    # FORGE_IMAGE_TRL in the console's environment wins over default_images
    monkeypatch.setenv("FORGE_IMAGE_TRL", "registry.local/t:env")
    r = _resolve(TRL, cfg, version="1.15.0")
    assert (r.image, r.detail) == ("registry.local/t:env", "FORGE_IMAGE_TRL in the console's environment")
    # the submission wins over everything: config.yaml image:, then --image over it
    r = _resolve(TRL, cfg, config={"image": "registry.local/mine:1"})
    assert (r.image, r.source, r.detail) == (
        "registry.local/mine:1",
        job_pb2.IMAGE_SOURCE_SUBMISSION,
        "config.yaml `image:`",
    )
    r = _resolve(TRL, cfg, image="registry.local/flag:1", config={"image": "registry.local/mine:1"})
    assert (r.image, r.detail) == ("registry.local/flag:1", "--image")


def test_env_names() -> None:
    assert images.env_name("trl") == "FORGE_IMAGE_TRL"
    assert images.env_name("nemo-rl") == "FORGE_IMAGE_NEMO_RL"


def test_custom_without_an_image_is_refused_naming_every_way(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FORGE_IMAGE_CUSTOM", raising=False)
    cfg = ControlConfig(fleets=[FleetConfig("docker", "local", "127.0.0.1:1")])
    with pytest.raises(errors.InvalidArgument) as caught:
        _resolve(CUSTOM, cfg)
    assert caught.value.message == images.missing_message("custom/custom", "custom")
    for way in (
        "--image",
        "`image:` in config.yaml",
        "FORGE_IMAGE_CUSTOM",
        "default_images.custom",
        "runtime registry",
    ):
        assert way in caught.value.message


def test_a_declared_host_runtime_fleet_gives_host_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FORGE_IMAGE_CUSTOM", raising=False)
    fleets = [FleetConfig("local", "local", "127.0.0.1:1", host_runtime=True), FleetConfig("d", "local", "127.0.0.1:2")]
    r = _resolve(CUSTOM, ControlConfig(fleets=fleets))
    assert (r.image, r.source) == ("host", job_pb2.IMAGE_SOURCE_HOST_RUNTIME)
    assert "fleet local declares the host runtime" in r.detail
    # pinned to the fleet without the declaration: nothing falls back
    spec = job_spec_pb2.JobSpec(fleet="d")
    with pytest.raises(errors.InvalidArgument, match="needs an image"):
        admission.resolve_image(spec, CUSTOM, CUSTOM.runtimes[0], {}, ControlConfig(fleets=fleets))


def test_requires_image_never_takes_the_catalog(tmp_path: pathlib.Path) -> None:
    # a catalog method always has its runtime's image; custom/custom (requires_image) has none
    assert not TRL.requires_image and all(r.image for r in TRL.runtimes)
    assert CUSTOM.requires_image and not any(r.image for r in CUSTOM.runtimes)
    from recipes.catalog import load_recipe

    path = tmp_path / "catalog" / "custom" / "custom" / "recipe.yaml"
    path.parent.mkdir(parents=True)
    text = pathlib.Path(CUSTOM.path).read_text().replace('image: ""', "image: registry.local/x:1")
    path.write_text(text)
    with pytest.raises(ConfigError, match="requires_image is true"):
        load_recipe(path)


def test_unknown_framework_version_lists_the_known_ones() -> None:
    with pytest.raises(errors.InvalidArgument) as caught:
        admission.resolve_runtime(job_spec_pb2.JobSpec(framework_version="9.9"), TRL)
    assert caught.value.message == "trl/sft has no framework version '9.9'; known versions: 1.16.0, 1.15.0"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("runtimes: {trl: {1.16: registry.local/x:1}}", "quote the version"),
        ("runtimes: {trl: {'1.16.0': 'Not An Image'}}", "is not an image reference"),
        ("images: {}", "expected one key, runtimes"),
        ("runtimes: [trl]", "runtimes must map frameworks"),
    ],
)
def test_a_bad_registry_file_stops_the_console(tmp_path: pathlib.Path, text: str, message: str) -> None:
    path = _registry(tmp_path, text)
    with pytest.raises(ConfigError, match=message):
        load(None, {"STARFORGE_RUNTIME_REGISTRY_FILE": str(path)})


def test_the_registry_file_is_read_again_when_it_changes(tmp_path: pathlib.Path) -> None:
    path = _registry(tmp_path, "runtimes: {trl: {'1.16.0': registry.local/a:1}}\n")
    assert images.load_registry(path).image("trl", "1.16.0") == "registry.local/a:1"
    path.write_text("runtimes: {trl: {'1.16.0': registry.local/bb:2}}\n")
    assert images.load_registry(path).image("trl", "1.16.0") == "registry.local/bb:2"


def _fleets(*production: bool) -> ControlConfig:
    return ControlConfig(
        fleets=[FleetConfig(f"f{i}", "local", f"127.0.0.1:{i + 1}", production=p) for i, p in enumerate(production)]
    )


def test_a_tag_on_a_production_fleet_is_a_warning() -> None:
    cfg = _fleets(True, False)
    (warning,) = admission.tag_warning("registry.local/x:1", ["f0", "f1"], cfg)
    assert warning == (
        "image registry.local/x:1 is pinned by tag, not by digest, and the job may run on production fleet(s) f0: "
        "a tag can be moved; pin it as registry.local/x@sha256:<digest>"
    )
    assert admission.tag_warning(f"registry.local/x@{DIGEST}", ["f0"], cfg) == []
    assert admission.tag_warning(f"registry.local/x:1@{DIGEST}", ["f0"], cfg) == []
    assert admission.tag_warning("registry.local/x:1", ["f1"], cfg) == []  # not production
    assert admission.tag_warning("host", ["f0"], cfg) == []
