"""Container images: parsing references, the allowlist, and where a job's image comes from.

A job's image is resolved in this order (the first that gives one wins; docs/images.md):

1. the submission: `sf submit --image`, else config.yaml `image:`;
2. the console's framework default: `FORGE_IMAGE_<FRAMEWORK>` in the console's environment, else
   `default_images.<framework>` of its configuration;
3. the runtime registry file (`runtime_registry_file`): framework -> framework version -> image;
4. the catalog: the image of the chosen runtime in the recipe;
5. a fleet that declares `host_runtime: true`: the job runs on that fleet's own environment
   (image `host`), said as such on the job.

Nothing else is tried: a method without an image from any of these is refused, naming them.
"""

from __future__ import annotations

import functools
import os
import pathlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import yaml
from starforge_api.job.v1 import job_pb2

from common.config import ConfigError

HOST_IMAGE = "host"  # run in the executor host's own environment (host-runtime fleets only)
ENV_PREFIX = "FORGE_IMAGE_"

# The OCI distribution reference grammar (registry host[:port], lowercase path components,
# then :tag and/or @digest).
_HOST = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)(?:\.(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?))*(?::[0-9]+)?"
_COMPONENT = r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*"
_REFERENCE = re.compile(
    rf"^(?P<name>(?:{_HOST}/)?{_COMPONENT}(?:/{_COMPONENT})*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?"
    r"(?:@(?P<digest>[a-z0-9]+(?:[+._-][a-z0-9]+)*:[0-9a-fA-F]{32,}))?$"
)
_ALLOW_ENTRY = re.compile(rf"^(?:{_HOST})(?:/{_COMPONENT})*$|^{_COMPONENT}(?:/{_COMPONENT})*$")
MAX_REFERENCE = 500  # the jobs.image column


@dataclass(frozen=True)
class ImageRef:
    """A parsed image reference: `name` is registry/repository, without tag or digest."""

    text: str
    name: str
    tag: str
    digest: str


def parse_ref(text: str) -> ImageRef | None:
    """The reference, or None when `text` is not a valid image reference."""
    if len(text) > MAX_REFERENCE:
        return None
    m = _REFERENCE.match(text)
    if m is None:
        return None
    return ImageRef(text=text, name=m.group("name"), tag=m.group("tag") or "", digest=m.group("digest") or "")


def check_allow_entry(entry: str) -> str:
    """An allowlist entry normalised (no trailing '/'); ConfigError when it is no registry or
    repository path (an entry such as "registry.local" or "registry.local/team")."""
    normal = entry.rstrip("/")
    if not normal or not _ALLOW_ENTRY.match(normal):
        raise ConfigError(
            f"image_allowlist: {entry!r} is not a registry or repository path (e.g. registry.local or "
            "registry.local/team)"
        )
    return normal


def allowed(ref: ImageRef, allowlist: Iterable[str]) -> bool:
    """Whether the image's registry/repository is one of the entries or lies under one, matched at
    '/' boundaries: "registry.local" admits registry.local/x, never registry.local.evil.io/x or
    registry.localhost/x; "registry.local/team" never admits registry.local/team-evil/x."""
    name = ref.name.lower()
    for entry in allowlist:
        normal = entry.rstrip("/").lower()
        if normal and (name == normal or name.startswith(normal + "/")):
            return True
    return False


def env_name(framework: str) -> str:
    """FORGE_IMAGE_<FRAMEWORK>: upper case, '-' and '.' as '_' (nemo-rl -> FORGE_IMAGE_NEMO_RL)."""
    return ENV_PREFIX + re.sub(r"[^A-Z0-9]", "_", framework.upper())


# -- the runtime registry file ----------------------------------------------------------------------


@dataclass(frozen=True)
class RuntimeRegistry:
    """framework -> framework version -> image, from the console's runtime registry file."""

    path: str
    images: Mapping[str, Mapping[str, str]]

    def image(self, framework: str, version: str) -> str:
        return self.images.get(framework, {}).get(version, "")


EMPTY_REGISTRY = RuntimeRegistry("", {})


def parse_registry(text: str, where: str) -> RuntimeRegistry:
    """`runtimes: {<framework>: {"<version>": <image>}}`; anything else is a ConfigError."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{where}: not valid YAML: {e}") from None
    doc = {} if doc is None else doc
    if not isinstance(doc, dict) or set(doc) - {"runtimes"}:
        raise ConfigError(f'{where}: expected one key, runtimes: {{<framework>: {{"<version>": <image>}}}}')
    runtimes = doc.get("runtimes") or {}
    if not isinstance(runtimes, dict):
        raise ConfigError(f"{where}: runtimes must map frameworks to {{version: image}}")
    images: dict[str, dict[str, str]] = {}
    for framework, versions in runtimes.items():
        if not isinstance(framework, str) or not isinstance(versions, dict):
            raise ConfigError(f"{where}: runtimes.{framework} must map framework versions to images")
        images[framework] = {}
        for version, image in versions.items():
            if not isinstance(version, str):
                raise ConfigError(
                    f'{where}: runtimes.{framework}: quote the version {version!r} ("{version}"): '
                    "YAML reads it as a number"
                )
            if not isinstance(image, str) or (image != HOST_IMAGE and parse_ref(image) is None):
                raise ConfigError(f"{where}: runtimes.{framework}.{version}: {image!r} is not an image reference")
            images[framework][version] = image
    return RuntimeRegistry(where, images)


@functools.lru_cache(maxsize=4)
def _read_registry(path: str, mtime_ns: int, size: int) -> RuntimeRegistry:
    return parse_registry(pathlib.Path(path).read_text(), path)


def load_registry(path: pathlib.Path | None) -> RuntimeRegistry:
    """The registry file as it is now (re-read when it changes); EMPTY_REGISTRY without one."""
    if path is None:
        return EMPTY_REGISTRY
    resolved = path.expanduser()
    try:
        st = resolved.stat()
    except OSError as e:
        raise ConfigError(f"runtime_registry_file: cannot read {resolved}: {e.strerror}") from None
    return _read_registry(str(resolved), st.st_mtime_ns, st.st_size)


# -- resolution -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Resolved:
    """The image a job runs and where it came from (shown by `sf job status` and the UI)."""

    image: str
    source: int  # job_pb2.ImageSource
    detail: str


@dataclass(frozen=True)
class Candidates:
    """Everything resolution may look at for one submission."""

    framework: str
    framework_version: str
    submitted: str  # spec.image
    config_image: str  # config.yaml image:
    catalog_image: str
    default_images: Mapping[str, str]
    registry: RuntimeRegistry
    host_fleets: list[str]  # fleets (that may run the job) declaring host_runtime
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)


def resolve(c: Candidates) -> Resolved | None:
    """The first source that names an image, in the documented order; None when none does."""
    if c.submitted:
        via = "config.yaml `image:`" if c.submitted == c.config_image else "--image"
        return Resolved(c.submitted, job_pb2.IMAGE_SOURCE_SUBMISSION, via)
    var = env_name(c.framework)
    if c.environ.get(var):
        return Resolved(c.environ[var], job_pb2.IMAGE_SOURCE_CONSOLE_DEFAULT, f"{var} in the console's environment")
    if c.default_images.get(c.framework):
        return Resolved(
            c.default_images[c.framework],
            job_pb2.IMAGE_SOURCE_CONSOLE_DEFAULT,
            f"default_images.{c.framework} of the console configuration",
        )
    registry_image = c.registry.image(c.framework, c.framework_version)
    if registry_image:
        return Resolved(
            registry_image,
            job_pb2.IMAGE_SOURCE_RUNTIME_REGISTRY,
            f"{c.registry.path}: runtimes.{c.framework}.{c.framework_version}",
        )
    if c.catalog_image:
        return Resolved(
            c.catalog_image, job_pb2.IMAGE_SOURCE_CATALOG, f"the catalog's {c.framework} {c.framework_version} runtime"
        )
    if c.host_fleets:
        fleets = ", ".join(c.host_fleets)
        return Resolved(
            HOST_IMAGE,
            job_pb2.IMAGE_SOURCE_HOST_RUNTIME,
            f"fleet {fleets} declares the host runtime (host_runtime: true): no container",
        )
    return None


def missing_message(method: str, framework: str) -> str:
    """The refusal of a method no source gave an image, naming every way to give one."""
    return (
        f"{method} needs an image and none was given: pass --image <ref> or set `image:` in config.yaml; "
        f"or an admin sets {env_name(framework)} or default_images.{framework} on the console, adds it to the "
        "runtime registry file, or declares a host_runtime fleet"
    )


def pinned_by_tag(ref: ImageRef) -> bool:
    """True when the reference names a tag (or nothing, i.e. `latest`) instead of a digest."""
    return not ref.digest
