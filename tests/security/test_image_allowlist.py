"""The image allowlist matches registries and repository paths at '/' boundaries, never as string
prefixes: a user who may run images of registry.local cannot name a look-alike registry or a
sibling repository and have it admitted.

The refusals go through admission's own resolve_image (what SubmitJob runs); the same strings are
refused through `sf` against a real console in tests/integration/test_images.py.
"""

from __future__ import annotations

import json

import pytest
from starforge_api.job.v1 import job_spec_pb2

from common import errors
from control import admission, images
from control.config import ControlConfig, FleetConfig
from recipes.catalog import load_catalog

CATALOG = load_catalog()

ATTACKS = [
    # a look-alike registry: the entry is a prefix of its host name
    ("registry.local", "registry.local.evil.io/x:1"),
    ("registry.local", "registry.localhost/x:1"),
    ("registry.local", "registry.local-evil.io/x:1"),
    ("registry.local", "registry.local:5000/x:1"),  # another port is another registry
    ("registry.local/", "registry.local.evil.io/x:1"),
    # a sibling repository: the entry is a prefix of its first path component
    ("registry.local/team", "registry.local/team-evil/x:1"),
    ("registry.local/team", "registry.local/teamx:1"),
    ("registry.local/team/", "registry.local/team-evil/x:1"),
    ("nvcr.io/nvidia", "nvcr.io/nvidia-evil/nemo:1"),
    # the entry only as a later path component, or tucked behind a tag or digest
    ("registry.local", "evil.io/registry.local/x:1"),
    ("registry.local/team", "evil.io/x:registry.local/team"),
]

ADMITTED = [
    ("registry.local", "registry.local/x:1"),
    ("registry.local", "registry.local/team/deep/x@sha256:" + "a" * 64),
    ("registry.local/", "registry.local/x:1"),
    ("registry.local/team", "registry.local/team/x:1"),
    ("registry.local/team", "registry.local/team"),
    ("registry.local:5000", "registry.local:5000/x:1"),
    ("REGISTRY.local", "registry.local/x:1"),  # host names are case-insensitive
]


def _admit_image(entry: str, image: str) -> images.Resolved:
    recipe = CATALOG.recipes["custom/custom"]
    runtime = admission.resolve_runtime(job_spec_pb2.JobSpec(), recipe)
    cfg = ControlConfig(image_allowlist=[entry], fleets=[FleetConfig("f", "local", "127.0.0.1:1")])
    spec = job_spec_pb2.JobSpec(image=image, config_json=json.dumps({}))
    return admission.resolve_image(spec, recipe, runtime, {}, cfg)


@pytest.mark.parametrize(("entry", "image"), ATTACKS)
def test_look_alike_registries_and_sibling_repositories_are_refused(entry: str, image: str) -> None:
    ref = images.parse_ref(image)
    assert ref is None or not images.allowed(ref, [entry])
    with pytest.raises((errors.PermissionDenied, errors.InvalidArgument)) as caught:
        _admit_image(entry, image)
    if isinstance(caught.value, errors.PermissionDenied):
        assert f"image {image} is not from an allowed registry (allowed: {entry})" in caught.value.message


@pytest.mark.parametrize(("entry", "image"), ADMITTED)
def test_images_under_an_entry_are_admitted(entry: str, image: str) -> None:
    resolved = _admit_image(entry, image)
    assert resolved.image == image


@pytest.mark.parametrize(
    "image",
    [
        "registry.local/../evil/x:1",
        "registry.local//x:1",
        "registry.local/X:1",  # repositories are lower case
        "registry.local/x:1 --privileged",
        "registry.local/x@sha256:short",
        "",
    ],
)
def test_malformed_references_are_refused_before_the_allowlist(image: str) -> None:
    assert images.parse_ref(image) is None
    if image:
        with pytest.raises(errors.InvalidArgument, match="is not a valid image reference"):
            _admit_image("registry.local", image)


@pytest.mark.parametrize("entry", ["", "/", "https://registry.local", "registry.local/team:1", "a b"])
def test_an_allowlist_entry_that_is_no_path_stops_the_console(entry: str) -> None:
    from common.config import ConfigError

    with pytest.raises(ConfigError, match="is not a registry or repository path"):
        ControlConfig(image_allowlist=[entry]).validate_images()
