"""Admission: every check a submission passes before it is queued. The server never trusts `sf`.

Each refusal is a StarforgeError with the one sentence a user reads and rich details; nothing is
written before all checks pass. Checks that need I/O (blob presence, fleets) come last.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from starforge_api.control.v1 import error_reason_pb2 as er
from starforge_api.executor.v1 import executor_service_pb2 as ex
from starforge_api.job.v1 import job_pb2, job_spec_pb2, workspace_pb2

from capsule.runner import observability as obs
from common import errors, profiles, runtimes
from common.hashing import is_digest, manifest_digest
from common.sensitive import CONTENT_LIMIT, bad_path, why_sensitive
from control import hf, images
from control.assembly import entrypoint, observability, resolved_observability
from control.auth import Principal
from control.blobstore import BlobStore
from control.config import DEFAULT_QUEUE, ControlConfig
from control.executors import ExecutorPool
from recipes import params
from recipes.catalog import Catalog, RecipeDecl, RuntimeDecl

API_VERSION = "forge/v2"
PROJECT_RE = re.compile(r"^@(?P<user>[a-z][a-z0-9-]{1,31})/(?P<name>[A-Za-z0-9][A-Za-z0-9._-]{0,99})$")
EXPERIMENT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
HOST_IMAGE = images.HOST_IMAGE


@dataclass
class Admitted:
    recipe: RecipeDecl
    pools: list[job_spec_pb2.Pool]
    resolved_config: dict[str, Any]
    image: str
    runtime_id: str
    framework_version: str
    image_source: int  # job_pb2.ImageSource
    image_source_detail: str
    fleets: list[str]
    series: str
    gpus: int
    warnings: list[str] = field(default_factory=list)
    # Mode, URL and tool as resolved from the flags, config.yaml and the recipe (stored in the job).
    observability: job_spec_pb2.Observability = field(default_factory=job_spec_pb2.Observability)


def _field(field: str, message: str, reason: int = er.ERROR_REASON_INVALID_ARGUMENT) -> errors.InvalidArgument:
    return errors.InvalidArgument(message, reason=reason, field_violations=(errors.FieldViolation(field, message),))


class Violations:
    """Collects the field violations of one request so that one refusal lists them all.

    `collect()` wraps a check: an InvalidArgument it raises is kept and admission goes on; any
    other refusal (unknown method, image not allowed, ...) first raises the violations collected
    so far, else itself. Field paths are made relative to the request (`spec.<field>`).
    """

    def __init__(self, prefix: str = "spec.") -> None:
        self.prefix = prefix
        self.errors: list[errors.InvalidArgument] = []

    @contextlib.contextmanager
    def collect(self) -> Iterator[None]:
        try:
            yield
        except errors.InvalidArgument as e:
            self.errors.append(e)
        except errors.StarforgeError:
            self.raise_if_any()
            raise

    @property
    def failed(self) -> bool:
        return bool(self.errors)

    def _path(self, field: str) -> str:
        return field if not field or field.startswith(self.prefix) else self.prefix + field

    def raise_if_any(self) -> None:
        if not self.errors:
            return
        found = [
            errors.FieldViolation(self._path(v.field), _cut(v.description, MAX_DESCRIPTION))
            for e in self.errors
            for v in (e.field_violations or (errors.FieldViolation("", e.message),))
        ]
        # The details travel in a trailer, which clients cap (8 KiB by default): a spec with
        # thousands of bad files gets the first violations and a count, never an unreadable status.
        fields = tuple(found[:MAX_VIOLATIONS])
        if len(self.errors) == 1:
            only = self.errors[0]
            raise dataclasses.replace(only, field_violations=fields)
        reasons = {e.reason for e in self.errors}
        listed = "; ".join(f"{v.field}: {v.description}" if v.field else v.description for v in fields[:5])
        more = f" (and {len(found) - 5} more)" if len(found) > 5 else ""
        raise errors.InvalidArgument(
            f"{len(found)} fields of the job are invalid: {listed}{more}",
            reason=reasons.pop() if len(reasons) == 1 else er.ERROR_REASON_INVALID_ARGUMENT,
            field_violations=fields,
        )


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


MAX_VIOLATIONS = 20
MAX_DESCRIPTION = 300


LABEL_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$")
MAX_LABELS = 32
MAX_LABEL_VALUE = 256


def check_labels(labels: Mapping[str, str], bad: Violations) -> None:
    """Label keys are short identifiers (so `sf job ls -l key=value` can match them exactly)."""
    with bad.collect():
        if len(labels) > MAX_LABELS:
            raise _field("labels", f"at most {MAX_LABELS} labels per job; got {len(labels)}")
    for key, value in labels.items():
        with bad.collect():
            if not LABEL_KEY_RE.match(key):
                raise _field(
                    f"labels[{key!r}]",
                    f"label key {key!r} is not valid: use 1-63 of A-Z a-z 0-9 . _ / -, starting with a letter or digit",
                )
            if len(value) > MAX_LABEL_VALUE:
                raise _field(f"labels[{key!r}]", f"label {key} is longer than {MAX_LABEL_VALUE} characters")


def check_identity(spec: job_spec_pb2.JobSpec, principal: Principal, bad: Violations) -> None:
    with bad.collect():
        if spec.api_version != API_VERSION:
            raise _field("api_version", f"api_version must be {API_VERSION!r}, got {spec.api_version!r}; upgrade sf")
    with bad.collect():
        m = PROJECT_RE.match(spec.project)
        if m is None:
            raise _field("project", f"project {spec.project!r} is not valid: use @<user>/<name> (see starforge.yaml)")
        if m.group("user") != principal.user and not principal.admin:
            raise errors.PermissionDenied(
                f"project {spec.project} belongs to @{m.group('user')}; you are @{principal.user} "
                f'(set `project: "@{principal.user}/{m.group("name")}"` in starforge.yaml)'
            )
    with bad.collect():
        if not EXPERIMENT_RE.match(spec.experiment):
            raise _field("experiment", f"experiment name {spec.experiment!r} is not valid")


def check_recipe(spec: job_spec_pb2.JobSpec, catalog: Catalog) -> RecipeDecl:
    recipe = catalog.get(spec.method)
    if recipe is None:
        close = [n for n in catalog.names() if n.split("/")[-1] == spec.method.split("/")[-1]]
        hint = f"; did you mean {', '.join(close)}?" if close else f"; published: {', '.join(catalog.names())}"
        raise errors.NotFound(
            f"method {spec.method!r} is not in the catalog{hint} (see `sf recipe ls`)",
            reason=er.ERROR_REASON_UNKNOWN_METHOD,
        )
    lock = spec.recipe_lock
    if lock.method != recipe.name or lock.version != recipe.version or lock.digest != recipe.digest:
        raise errors.FailedPrecondition(
            f"experiments/{spec.experiment}/recipe.lock.json is stale: it pins {lock.method or '?'} "
            f"{lock.version or '?'} ({lock.digest[:12] or 'no digest'}), the console publishes {recipe.name} "
            f"{recipe.version} ({recipe.digest[:12]}); run `sf recipe upgrade {spec.experiment}` "
            "or submit with --upgrade-recipe",
            reason=er.ERROR_REASON_STALE_RECIPE_LOCK,
            precondition_violations=(
                errors.PreconditionViolation("RECIPE_LOCK", f"{spec.experiment}/recipe.lock.json", "stale"),
            ),
            metadata={"server_version": recipe.version, "server_digest": recipe.digest},
        )
    return recipe


class _PrefixReader:
    """Reads of the blobs one submission lists: a bounded prefix (what the content rules check),
    each digest read once however many paths list it."""

    def __init__(self, store: BlobStore) -> None:
        self.store = store
        self.prefixes: dict[str, bytes] = {}

    def reader(self, digest: str) -> Callable[[], bytes]:
        def read() -> bytes:
            if digest not in self.prefixes:
                self.prefixes[digest] = self.store.read_prefix(digest, CONTENT_LIMIT)
            return self.prefixes[digest]

        return read


def check_manifest_totals(manifest: workspace_pb2.WorkspaceManifest) -> None:
    """A manifest's digest and total_bytes, when given, are those of its files (an empty one is
    filled in by the server): a submission cannot claim another workspace's digest."""
    with_digest = manifest_digest((f.path, f.sha256, f.executable) for f in manifest.files)
    if manifest.digest and manifest.digest != with_digest:
        raise _field(
            "workspace.digest",
            f"workspace digest {manifest.digest[:12]} is not the digest of the files listed ({with_digest[:12]}): "
            'sha256 over one "<sha256> <mode> <path>\\n" line per file, sorted by path',
        )
    total = sum(f.size for f in manifest.files)
    if manifest.total_bytes and manifest.total_bytes != total:
        raise _field(
            "workspace.total_bytes",
            f"workspace total_bytes {manifest.total_bytes} is not the sum of the file sizes ({total})",
        )


def fill_manifest_totals(manifest: workspace_pb2.WorkspaceManifest) -> None:
    """Record the digest and size the files give (a raw client may leave them empty)."""
    manifest.digest = manifest_digest((f.path, f.sha256, f.executable) for f in manifest.files)
    manifest.total_bytes = sum(f.size for f in manifest.files)


def check_workspace(
    spec: job_spec_pb2.JobSpec, recipe: RecipeDecl, store: BlobStore, bad: Violations, *, admitted: bool = False
) -> None:
    """Every file's path, digest, size and the sensitive-file rules, and the entry point of a
    custom recipe. `admitted`: the workspace is the stored manifest of a digest this caller was
    admitted with before (control/workspace_records.py), so only the entry point is checked."""
    if admitted:
        _check_entrypoints(spec, recipe, {f.path for f in spec.workspace.files})
        return
    paths = set()
    blobs = _PrefixReader(store)
    with bad.collect():
        check_manifest_totals(spec.workspace)
    for i, f in enumerate(spec.workspace.files):
        with bad.collect():
            why = bad_path(f.path)
            if why:
                raise _field(f"workspace.files[{i}].path", f"workspace path {f.path!r} {why}")
            if not is_digest(f.sha256):
                raise _field(f"workspace.files[{i}].sha256", "must be 64 lowercase hex characters")
            if f.size < 0:
                raise _field(f"workspace.files[{i}].size", "must not be negative")
            why = why_sensitive(f.path, read=blobs.reader(f.sha256))
            if why:
                raise _field(
                    f"workspace.files[{i}].path",
                    f"the package contains {f.path} ({why}); remove it from git or add it to "
                    "package.exclude in starforge.yaml",
                    er.ERROR_REASON_SENSITIVE_FILE,
                )
            if f.path in paths:
                raise _field(f"workspace.files[{i}].path", f"workspace path {f.path!r} appears twice")
        paths.add(f.path)
    _check_entrypoints(spec, recipe, paths)


def _check_entrypoints(spec: job_spec_pb2.JobSpec, recipe: RecipeDecl, paths: set[str]) -> None:
    """A custom recipe's stages each run a script the workspace must hold."""
    if recipe.adapter == "custom":
        for stage in ["", *spec.then_stages]:
            entry = entrypoint(recipe, spec.experiment, stage)
            if entry not in paths:
                what = f"the {stage} stage" if stage else "custom/custom"
                raise _field(
                    "workspace.files",
                    f"{entry} not found in the package: {what} runs it (create it, `git add` it, and submit again)",
                    er.ERROR_REASON_MISSING_INPUT,
                )


def check_inputs(spec: job_spec_pb2.JobSpec, recipe: RecipeDecl, config: dict[str, Any]) -> None:
    if recipe.requires_model and not spec.model:
        raise _field(
            "model",
            f"{recipe.name} needs a model: pass --model <hf-id-or-path>",
            er.ERROR_REASON_MISSING_INPUT,
        )
    if recipe.requires_train_data and not (spec.train_data.path or spec.train_data.dataset):
        raise _field(
            "train_data",
            f"{recipe.name} needs training data: pass --train-data <path> (or --train-dataset owner/name@v)",
            er.ERROR_REASON_MISSING_INPUT,
        )
    if recipe.requires_validation_data and not (spec.validation_data.path or spec.validation_data.dataset):
        raise _field(
            "validation_data",
            f"{recipe.name} needs validation data: pass --validation-data <path> "
            "(or set data.validation in config.yaml)",
            er.ERROR_REASON_MISSING_INPUT,
        )
    mode, url = observability(spec, recipe, config)
    if config.get("observability") not in (None, "platform", "external") and not isinstance(
        config.get("observability"), dict
    ):
        raise _field("observability", "config.yaml `observability:` must be platform or external")
    if mode == "external" and not url:
        declared = config.get("observability") == "external" or spec.observability.mode
        why = (
            "config.yaml says `observability: external`"
            if declared
            else (f"{recipe.name} reports to an external tracker by default")
        )
        raise _field(
            "observability.url",
            f"{why}: pass --observability-url <url>, "
            "or set `observability: platform` in config.yaml to use StarForge's metrics",
            er.ERROR_REASON_MISSING_INPUT,
        )
    check_observability(spec, recipe, config)
    for stage in spec.then_stages:
        if stage not in recipe.stages:
            raise _field(
                "then_stages",
                f"--then {stage}: {recipe.name} offers stages {', '.join(recipe.stages) or 'none'}",
            )


def check_observability(spec: job_spec_pb2.JobSpec, recipe: RecipeDecl, config: dict[str, Any]) -> None:
    """An external tracker URL is http(s) with a host; a named tool is one StarForge knows."""
    resolved = resolved_observability(spec, recipe, config)
    if resolved.mode != job_spec_pb2.OBSERVABILITY_MODE_EXTERNAL:
        return
    problem = obs.url_problem(resolved.url)
    if problem:
        raise _field("observability.url", f"observability URL {resolved.url[:200]!r} {problem}")
    if resolved.tool not in obs.TOOL_VARIABLES:
        known = ", ".join(sorted(obs.TOOL_VARIABLES))
        if spec.observability.tool or (isinstance(config.get("observability"), dict) and resolved.tool):
            raise _field("observability.tool", f"unknown observability tool {resolved.tool[:50]!r}; known: {known}")


def check_shapes(recipe: RecipeDecl, pools: Sequence[job_spec_pb2.Pool]) -> None:
    """Methods that need GPUs, and methods that run on one node only."""
    if not recipe.runs_on_cpu and any(p.gpus_per_node == 0 for p in pools):
        raise _field(
            "pools",
            f"{recipe.name} needs GPUs; ask for a GPU profile (e.g. --profile {recipe.default_profile or 'h100:1'})",
            er.ERROR_REASON_BAD_PROFILE,
        )
    if recipe.max_nodes and any(p.nodes > recipe.max_nodes for p in pools):
        raise _field(
            "pools",
            f"{recipe.name} runs on at most {recipe.max_nodes} node(s) per pool; ask for fewer GPUs",
            er.ERROR_REASON_BAD_PROFILE,
        )


def _get(config: dict[str, Any], key: str) -> Any:
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def check_global_batch(recipe: RecipeDecl, pools: Sequence[job_spec_pb2.Pool], config: dict[str, Any]) -> None:
    """The global batch must split evenly over the data-parallel ranks (the GPUs of the training pool)."""
    if not recipe.global_batch_key:
        return
    value = _get(config, recipe.global_batch_key)
    train = [p for p in pools if not recipe.data_parallel_pool or p.name == recipe.data_parallel_pool] or list(pools)
    dp = sum(p.nodes * p.gpus_per_node for p in train)
    if isinstance(value, int) and dp > 0 and value % dp != 0:
        lower, upper = value - value % dp, value - value % dp + dp
        key = recipe.global_batch_key
        raise errors.InvalidArgument(
            f"{key}={value} does not divide over {dp} data-parallel GPUs; use a multiple of {dp} "
            f"(e.g. {lower or upper} or {upper})",
            reason=er.ERROR_REASON_BAD_BATCH_SIZE,
            field_violations=(errors.FieldViolation(f"overrides[{key}]", f"must be a multiple of {dp}"),),
        )


def resolve_runtime(spec: job_spec_pb2.JobSpec, recipe: RecipeDecl) -> RuntimeDecl:
    """The runtime of the framework version asked for (--framework-version, else the lock's)."""
    asked = spec.framework_version or spec.recipe_lock.framework_version
    runtime = recipe.runtime(asked)
    if runtime is None:
        known = ", ".join(r.framework_version for r in recipe.runtimes)
        raise _field(
            "framework_version",
            f"{recipe.name} has no framework version {asked!r}; known versions: {known}",
        )
    return runtime


def _host_fleets(spec: job_spec_pb2.JobSpec, cfg: ControlConfig) -> list[str]:
    return [f.name for f in cfg.fleets if f.host_runtime and (not spec.fleet or f.name == spec.fleet)]


def resolve_image(
    spec: job_spec_pb2.JobSpec, recipe: RecipeDecl, runtime: RuntimeDecl, config: dict[str, Any], cfg: ControlConfig
) -> images.Resolved:
    """The job's image and its source, in the order of control/images.py; the reference must be
    valid and its registry/repository allowlisted ("host" needs no entry)."""
    config_image = config.get("image")
    if config_image is not None and not isinstance(config_image, str):
        raise _field("image", "config.yaml `image` must be an image reference string")
    resolved = images.resolve(
        images.Candidates(
            framework=recipe.framework,
            framework_version=runtime.framework_version,
            submitted=spec.image or config_image or "",
            config_image=config_image or "",
            # requires_image: the catalog names no image for this method; the user or the console must
            catalog_image="" if recipe.requires_image else runtime.image,
            default_images=cfg.default_images,
            registry=images.load_registry(cfg.runtime_registry_file),
            host_fleets=_host_fleets(spec, cfg),
        )
    )
    if resolved is None:
        raise _field("image", images.missing_message(recipe.name, recipe.framework), er.ERROR_REASON_MISSING_INPUT)
    if resolved.image == images.HOST_IMAGE:
        return resolved
    ref = images.parse_ref(resolved.image)
    if ref is None:
        raise _field(
            "image",
            f"image {resolved.image!r} ({resolved.detail}) is not a valid image reference: "
            "use [registry/]repository[:tag][@sha256:digest] in lower case",
        )
    if not images.allowed(ref, cfg.image_allowlist):
        allowed = ", ".join(cfg.image_allowlist) or "none"
        raise errors.PermissionDenied(
            f"image {resolved.image} is not from an allowed registry (allowed: {allowed}); push it to one of them "
            "or ask an admin to allow its registry",
            reason=er.ERROR_REASON_IMAGE_NOT_ALLOWED,
        )
    return resolved


def tag_warning(image: str, fleets: Sequence[str], cfg: ControlConfig) -> list[str]:
    """A production submission (one a production fleet may run) should pin its image by digest."""
    ref = None if image == images.HOST_IMAGE else images.parse_ref(image)
    production = [f for f in fleets if (fc := cfg.fleet(f)) is not None and fc.production]
    if ref is None or not production or not images.pinned_by_tag(ref):
        return []
    return [
        f"image {image} is pinned by tag, not by digest, and the job may run on production fleet(s) "
        f"{', '.join(production)}: a tag can be moved; pin it as {ref.name}@sha256:<digest>"
    ]


def parse_config(spec: job_spec_pb2.JobSpec) -> dict[str, Any]:
    try:
        config = json.loads(spec.config_json or "{}")
    except json.JSONDecodeError as e:
        raise _field("config_json", f"config is not valid JSON: {e}") from None
    if not isinstance(config, dict):
        raise _field("config_json", "config must be a mapping (config.yaml's top level)")
    return config


def eligible_fleets(
    pools: Sequence[job_spec_pb2.Pool],
    image: str,
    spec: job_spec_pb2.JobSpec,
    cfg: ControlConfig,
    executors: ExecutorPool,
    *,
    host_only: bool = False,
) -> list[str]:
    """Fleets that could ever run the job; refuses with every fleet's reason when there is none.
    `host_only`: the image is "host" because fleets declared the host runtime: only those."""
    reasons: list[str] = []
    names: list[str] = []
    for fleet in cfg.fleets:
        if spec.fleet and fleet.name != spec.fleet:
            continue
        status = executors.status[fleet.name]
        why = ""
        if not fleet.serves(spec.queue):
            reasons.append(f"fleet {fleet.name} does not serve queue {spec.queue or DEFAULT_QUEUE}")
            continue
        inv = {i.series: i for i in fleet.inventory}
        if status.misconfigured:
            why = status.misconfigured
        elif not status.ever_reachable:
            why = status.why_unusable() or f"fleet {fleet.name}: executor not checked yet"
        elif len(pools) > 1 and ex.EXECUTOR_CAPABILITY_MULTI_POOL not in status.capabilities:
            why = f"fleet {fleet.name} ({fleet.kind}) cannot run several pools in one job"
        elif host_only and not fleet.host_runtime:
            why = f"fleet {fleet.name} does not declare the host runtime (the job has no image)"
        elif image == HOST_IMAGE and status.runtime not in runtimes.HOST_RUNTIMES:
            why = f"fleet {fleet.name} runs images ({status.runtime}); image 'host' needs a process-runtime fleet"
        elif image != HOST_IMAGE and status.runtime == "process":
            why = f"fleet {fleet.name} runs jobs on the host (process runtime) and cannot run image {image}"
        else:
            for p in pools:
                i = inv.get(p.series)
                if i is None:
                    why = f"fleet {fleet.name} has no {p.series} machines"
                elif p.nodes > i.nodes:
                    why = f"fleet {fleet.name} has {i.nodes} {p.series} node(s), the job needs {p.nodes}"
                elif p.gpus_per_node > i.gpus_per_node:
                    why = (
                        f"fleet {fleet.name}'s {p.series} nodes have {i.gpus_per_node} GPUs, "
                        f"the job needs {p.gpus_per_node} per node"
                    )
                elif p.nodes > 1 and ex.EXECUTOR_CAPABILITY_MULTI_NODE not in status.capabilities:
                    why = f"fleet {fleet.name} ({fleet.kind}) cannot run multi-node pools"
                if why:
                    break
        if why:
            reasons.append(why)
        else:
            names.append(fleet.name)
    if not names:
        if spec.fleet and not cfg.fleet(spec.fleet):
            reasons = [f"there is no fleet named {spec.fleet!r} (fleets: {', '.join(f.name for f in cfg.fleets)})"]
        raise errors.FailedPrecondition(
            "no fleet can run this job: " + "; ".join(reasons or ["no fleets are configured"]),
            reason=er.ERROR_REASON_NO_FLEET,
            precondition_violations=tuple(errors.PreconditionViolation("FLEET", "fleets", r) for r in reasons),
        )
    return names


def check_queue(spec: job_spec_pb2.JobSpec, cfg: ControlConfig) -> None:
    """--queue names a queue some fleet serves (fleets' `queues:`); empty is the default queue."""
    known = cfg.queue_names()
    queue = spec.queue or DEFAULT_QUEUE
    if queue not in known:
        given = f"unknown queue {queue[:64]!r}" if spec.queue else "no fleet serves the default queue; pass --queue"
        raise _field("queue", f"{given}; this console's queues: {', '.join(known) or 'none'}")


def hub_repos(spec: job_spec_pb2.JobSpec) -> list[hf.Repo]:
    """The HuggingFace repos a spec names (model, HF dataset ids); local paths are not repos."""
    paths = {f.path for f in spec.workspace.files}
    out = []
    if spec.model and hf.looks_like_hub_id(spec.model, paths):
        out.append(hf.Repo("model", spec.model))
    for ref in (spec.train_data, spec.validation_data):
        if not ref.dataset and ref.path and hf.looks_like_hub_id(ref.path, paths):
            out.append(hf.Repo("dataset", ref.path))
    return out


def check_pools(recipe: RecipeDecl, pools: Sequence[job_spec_pb2.Pool]) -> None:
    if len(pools) > 1 and not recipe.multi_pool:
        raise _field(
            "pools",
            f"{recipe.name} runs on one pool; several --profile options need a multi-pool method",
            er.ERROR_REASON_BAD_PROFILE,
        )
    if len(pools) > 1 and recipe.pool_names:
        unknown = [p.name for p in pools if p.name not in recipe.pool_names]
        if unknown:
            raise _field(
                "pools",
                f"{recipe.name} pools are {', '.join(recipe.pool_names)}; got {', '.join(unknown)}",
                er.ERROR_REASON_BAD_PROFILE,
            )
    check_shapes(recipe, pools)


def check_blobs_present(sizes: Mapping[str, int | None], what: str) -> None:
    """Refuse (MISSING_BLOB) when a blob of `sizes` (BlobStore.sizes) is not stored."""
    missing = [d for d, size in sizes.items() if size is None]
    if missing:
        raise errors.FailedPrecondition(
            f"{len(missing)} {what} file(s) were not uploaded (first: {missing[0][:12]}); submit again with sf",
            reason=er.ERROR_REASON_MISSING_BLOB,
            precondition_violations=tuple(errors.PreconditionViolation("BLOB", d, "missing") for d in missing[:20]),
        )


def check_blobs(manifest: workspace_pb2.WorkspaceManifest, store: BlobStore) -> None:
    """Every file was uploaded, with the size the manifest claims."""
    sizes = store.sizes(sorted({f.sha256 for f in manifest.files}))
    check_blobs_present(sizes, "workspace")
    bad = Violations()
    for i, f in enumerate(manifest.files):
        with bad.collect():
            if sizes[f.sha256] != f.size:
                raise _field(
                    f"workspace.files[{i}].size",
                    f"{f.path} is {f.size} bytes in the manifest but its blob {f.sha256[:12]} has {sizes[f.sha256]}",
                )
    bad.raise_if_any()


def admit(
    spec: job_spec_pb2.JobSpec,
    principal: Principal,
    cfg: ControlConfig,
    catalog: Catalog,
    store: BlobStore,
    executors: ExecutorPool,
    hub: hf.HubChecker | None = None,
    *,
    blobs_checked: bool = False,
    workspace_admitted: bool = False,
) -> Admitted:
    """All checks; returns what the ledger needs to queue the job. `blobs_checked`: the caller
    has just taken every file's size from its stored blob (a workspace named by digest), so
    presence and sizes need no second look. `workspace_admitted`: that workspace's manifest is
    one this caller was admitted with before, its digest and total filled in from the stored
    manifest, so its files' paths need no second look either (`check_workspace`).

    Every field check runs, so one INVALID_ARGUMENT lists every bad field; a check that needs a
    field that was bad (the pools for the batch size) is skipped.
    """
    bad = Violations()
    check_identity(spec, principal, bad)
    with bad.collect():
        recipe = check_recipe(spec, catalog)
    config: dict[str, Any] = {}
    with bad.collect():
        config = parse_config(spec)
    with bad.collect():
        check_inputs(spec, recipe, config)
    check_workspace(spec, recipe, store, bad, admitted=workspace_admitted and blobs_checked)
    runtime: RuntimeDecl | None = None
    with bad.collect():
        runtime = resolve_runtime(spec, recipe)
    resolved: dict[str, Any] | None = None
    with bad.collect():
        if runtime is not None:
            resolved = params.resolve_config(recipe, config, spec.overrides, runtime.framework_version)
    pools: list[job_spec_pb2.Pool] = []
    with bad.collect():
        pools = profiles.resolve(spec.pools, cfg.profiles, recipe.default_profile)
        check_pools(recipe, pools)
        if resolved is not None:
            check_global_batch(recipe, pools, resolved)
    with bad.collect():
        if spec.retry_budget < 0:
            raise _field("retry_budget", "retry budget must not be negative")
    check_labels(spec.labels, bad)
    image: images.Resolved | None = None
    with bad.collect():
        if runtime is not None:
            image = resolve_image(spec, recipe, runtime, config, cfg)
    bad.raise_if_any()
    assert runtime is not None
    assert resolved is not None
    assert image is not None
    if not blobs_checked:
        check_blobs(spec.workspace, store)
    if not (workspace_admitted and blobs_checked):
        fill_manifest_totals(spec.workspace)
    check_queue(spec, cfg)
    host_only = image.source == job_pb2.IMAGE_SOURCE_HOST_RUNTIME
    fleets = eligible_fleets(pools, image.image, spec, cfg, executors, host_only=host_only)
    if hub is not None:
        for repo in hub_repos(spec):
            hub.check(repo)
    gpus = sum(p.nodes * p.gpus_per_node for p in pools)
    return Admitted(
        recipe=recipe,
        pools=pools,
        resolved_config=resolved,
        image=image.image,
        runtime_id=runtime.runtime_id,
        framework_version=runtime.framework_version,
        image_source=image.source,
        image_source_detail=image.detail,
        fleets=fleets,
        series=pools[0].series,
        gpus=gpus,
        warnings=tag_warning(image.image, fleets, cfg),
        observability=resolved_observability(spec, recipe, config),
    )
