"""Admission: every check a submission passes before it is queued. The server never trusts `sf`.

Each refusal is a StarforgeError with the one sentence a user reads and rich details; nothing is
written before all checks pass. Checks that need I/O (blob presence, fleets) come last.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from starforge.control.v1 import error_reason_pb2 as er
from starforge.executor.v1 import executor_service_pb2 as ex
from starforge.job.v1 import job_spec_pb2

from capsule.runner import observability as obs
from common import errors, profiles
from common.sensitive import CONTENT_LIMIT, bad_path, why_sensitive
from control import hf
from control.assembly import entrypoint, observability, resolved_observability
from control.auth import Principal
from control.blobstore import BlobStore
from control.config import DEFAULT_QUEUE, ControlConfig
from control.executors import ExecutorPool
from recipes import params
from recipes.catalog import Catalog, RecipeDecl

API_VERSION = "forge/v2"
PROJECT_RE = re.compile(r"^@(?P<user>[a-z][a-z0-9-]{1,31})/(?P<name>[A-Za-z0-9][A-Za-z0-9._-]{0,99})$")
EXPERIMENT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
HOST_IMAGE = "host"  # run in the executor host's own environment (process runtime only)


@dataclass
class Admitted:
    recipe: RecipeDecl
    pools: list[job_spec_pb2.Pool]
    resolved_config: dict[str, Any]
    image: str
    runtime_id: str
    fleets: list[str]
    series: str
    gpus: int
    warnings: list[str] = field(default_factory=list)
    # Mode, URL and tool as resolved from the flags, config.yaml and the recipe (stored in the job).
    observability: job_spec_pb2.Observability = field(default_factory=job_spec_pb2.Observability)


def _field(field: str, message: str, reason: int = er.ERROR_REASON_INVALID_ARGUMENT) -> errors.InvalidArgument:
    return errors.InvalidArgument(message, reason=reason, field_violations=(errors.FieldViolation(field, message),))


LABEL_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$")
MAX_LABELS = 32
MAX_LABEL_VALUE = 256


def check_labels(labels: Mapping[str, str]) -> None:
    """Label keys are short identifiers (so `sf job ls -l key=value` can match them exactly)."""
    if len(labels) > MAX_LABELS:
        raise _field("labels", f"at most {MAX_LABELS} labels per job; got {len(labels)}")
    for key, value in labels.items():
        if not LABEL_KEY_RE.match(key):
            raise _field(
                f"labels[{key!r}]",
                f"label key {key!r} is not valid: use 1-63 of A-Z a-z 0-9 . _ / -, starting with a letter or digit",
            )
        if len(value) > MAX_LABEL_VALUE:
            raise _field(f"labels[{key!r}]", f"label {key} is longer than {MAX_LABEL_VALUE} characters")


def check_identity(spec: job_spec_pb2.JobSpec, principal: Principal) -> None:
    if spec.api_version != API_VERSION:
        raise _field("api_version", f"api_version must be {API_VERSION!r}, got {spec.api_version!r}; upgrade sf")
    m = PROJECT_RE.match(spec.project)
    if m is None:
        raise _field("project", f"project {spec.project!r} is not valid: use @<user>/<name> (see starforge.yaml)")
    if m.group("user") != principal.user and not principal.admin:
        raise errors.PermissionDenied(
            f"project {spec.project} belongs to @{m.group('user')}; you are @{principal.user} "
            f'(set `project: "@{principal.user}/{m.group("name")}"` in starforge.yaml)'
        )
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


def check_workspace(spec: job_spec_pb2.JobSpec, recipe: RecipeDecl, store: BlobStore) -> None:
    paths = set()
    blobs = _PrefixReader(store)
    for f in spec.workspace.files:
        why = bad_path(f.path)
        if why:
            raise _field("workspace", f"workspace path {f.path!r} {why}")
        why = why_sensitive(f.path, read=blobs.reader(f.sha256))
        if why:
            raise _field(
                "workspace",
                f"the package contains {f.path} ({why}); remove it from git or add it to "
                "package.exclude in starforge.yaml",
                er.ERROR_REASON_SENSITIVE_FILE,
            )
        if f.path in paths:
            raise _field("workspace", f"workspace path {f.path!r} appears twice")
        paths.add(f.path)
    if recipe.adapter == "custom":
        for stage in ["", *spec.then_stages]:
            entry = entrypoint(recipe, spec.experiment, stage)
            if entry not in paths:
                what = f"the {stage} stage" if stage else "custom/custom"
                raise _field(
                    "workspace",
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


def resolve_image(
    spec: job_spec_pb2.JobSpec, recipe: RecipeDecl, config: dict[str, Any], cfg: ControlConfig
) -> tuple[str, str]:
    """(image, runtime_id): --image -> config.yaml image -> console default -> catalog runtime."""
    runtime = recipe.runtime(spec.framework_version or spec.recipe_lock.framework_version)
    if runtime is None:
        valid = ", ".join(r.framework_version for r in recipe.runtimes)
        raise _field(
            "framework_version",
            f"{recipe.name} has no framework version {spec.framework_version!r}; valid: {valid}",
        )
    image = (
        spec.image or str(config.get("image") or "") or cfg.default_images.get(recipe.framework, "") or runtime.image
    )
    if not image:
        raise _field(
            "image",
            f"{recipe.name} needs an image: pass --image <ref> or set `image:` in config.yaml",
            er.ERROR_REASON_MISSING_INPUT,
        )
    if image != HOST_IMAGE and not any(image.startswith(prefix) for prefix in cfg.image_allowlist):
        allowed = ", ".join(cfg.image_allowlist) or "none"
        raise errors.PermissionDenied(
            f"image {image} is not from an allowed registry (allowed: {allowed}); push it to one of them "
            "or ask an admin to allow its registry",
            reason=er.ERROR_REASON_IMAGE_NOT_ALLOWED,
        )
    return image, runtime.runtime_id


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
) -> list[str]:
    """Fleets that could ever run the job; refuses with every fleet's reason when there is none."""
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
        elif image == HOST_IMAGE and status.runtime not in ("process", "host"):
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


def admit(
    spec: job_spec_pb2.JobSpec,
    principal: Principal,
    cfg: ControlConfig,
    catalog: Catalog,
    store: BlobStore,
    executors: ExecutorPool,
    hub: hf.HubChecker | None = None,
) -> Admitted:
    """All checks; returns what the ledger needs to queue the job."""
    check_identity(spec, principal)
    recipe = check_recipe(spec, catalog)
    config = parse_config(spec)
    check_inputs(spec, recipe, config)
    check_workspace(spec, recipe, store)
    resolved = params.resolve_config(recipe, config, spec.overrides)
    pools = profiles.resolve(spec.pools, cfg.profiles, recipe.default_profile)
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
    check_global_batch(recipe, pools, resolved)
    if spec.retry_budget < 0:
        raise _field("retry_budget", "retry budget must not be negative")
    check_labels(spec.labels)
    image, runtime_id = resolve_image(spec, recipe, config, cfg)
    missing = store.missing(sorted({f.sha256 for f in spec.workspace.files}))
    if missing:
        raise errors.FailedPrecondition(
            f"{len(missing)} workspace file(s) were not uploaded (first: {missing[0][:12]}); submit again with sf",
            reason=er.ERROR_REASON_MISSING_BLOB,
            precondition_violations=tuple(errors.PreconditionViolation("BLOB", d, "missing") for d in missing[:20]),
        )
    check_queue(spec, cfg)
    fleets = eligible_fleets(pools, image, spec, cfg, executors)
    if hub is not None:
        for repo in hub_repos(spec):
            hub.check(repo)
    gpus = sum(p.nodes * p.gpus_per_node for p in pools)
    return Admitted(
        recipe=recipe,
        pools=pools,
        resolved_config=resolved,
        image=image,
        runtime_id=runtime_id,
        fleets=fleets,
        series=pools[0].series,
        gpus=gpus,
        observability=resolved_observability(spec, recipe, config),
    )
