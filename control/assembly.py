"""Assembly: JobSpec + server configuration + capsule -> LaunchRequest, independent of the backend.

Per attempt it writes capsule.json (every capsule and workspace file with its digest, and what to
run) into the blob store; its digest becomes FORGE_CAPSULE_SHA256, bootstrap.sh's trust root.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from starforge_api.executor.v1 import launch_request_pb2 as lr
from starforge_api.job.v1 import job_spec_pb2

from capsule import layout
from capsule.runner import observability as obs
from common.labels import LABEL_ATTEMPT, LABEL_JOB
from control.blobstore import BlobStore
from control.capsule_assets import CapsuleAssets
from recipes.catalog import RecipeDecl


@dataclass(frozen=True)
class AttemptInfo:
    job_id: str
    attempt_id: str
    number: int
    owner: str
    project: str
    resume: bool
    stage: str = ""
    out_key: str = ""  # pipeline stages share their training job's FORGE_OUT_DIR


def observability(spec: job_spec_pb2.JobSpec, recipe: RecipeDecl, config: dict[str, object]) -> tuple[str, str]:
    """(mode, url): --observability-url / spec first, then config.yaml `observability:`, then the recipe."""
    mode = spec.observability.mode
    url = spec.observability.url
    if mode == job_spec_pb2.OBSERVABILITY_MODE_PLATFORM:
        return "platform", url
    if mode == job_spec_pb2.OBSERVABILITY_MODE_EXTERNAL:
        return "external", url
    declared = config.get("observability")
    if isinstance(declared, dict):
        url = url or str(declared.get("url") or "")
        declared = declared.get("mode")
    if declared in ("platform", "external"):
        return str(declared), url
    if url:
        return "external", url
    return recipe.default_observability, url


def resolved_observability(
    spec: job_spec_pb2.JobSpec, recipe: RecipeDecl, config: dict[str, object]
) -> job_spec_pb2.Observability:
    """Mode, URL and tool as the job records them (admission stores this in the job's spec)."""
    mode, url = observability(spec, recipe, config)
    if mode == "platform":
        return job_spec_pb2.Observability(mode=job_spec_pb2.OBSERVABILITY_MODE_PLATFORM)
    declared = config.get("observability")
    explicit = spec.observability.tool or (str(declared.get("tool") or "") if isinstance(declared, dict) else "")
    return job_spec_pb2.Observability(
        mode=job_spec_pb2.OBSERVABILITY_MODE_EXTERNAL, url=url, tool=obs.tool_for(url, explicit)
    )


def capsule_json(
    info: AttemptInfo,
    spec: job_spec_pb2.JobSpec,
    pools: Sequence[job_spec_pb2.Pool],
    recipe: RecipeDecl,
    resolved_config: dict[str, object],
    assets: CapsuleAssets,
) -> bytes:
    """capsule.json of one attempt (capsule.layout writes the exact bytes bootstrap.sh verifies)."""
    config = json.loads(spec.config_json or "{}")
    observed = resolved_observability(spec, recipe, config)
    runtime = recipe.runtime(spec.framework_version or spec.recipe_lock.framework_version)
    return layout.capsule_json(
        job_id=info.job_id,
        attempt_id=info.attempt_id,
        attempt_number=info.number,
        runner=assets.runner,
        capsule_files=[layout.FileEntry(f.path, f.sha256, f.size, f.executable) for f in assets.files],
        workspace_files=[layout.FileEntry(f.path, f.sha256, f.size, f.executable) for f in spec.workspace.files],
        run=layout.RunInfo(
            method=recipe.name,
            adapter=recipe.adapter,
            experiment=spec.experiment,
            entrypoint=entrypoint(recipe, spec.experiment, info.stage),
            config=resolved_config,
            observability=observability(spec, recipe, config)[0],
            observability_url=observed.url,
            observability_tool=observed.tool,
            runtime_id=runtime.runtime_id if runtime else "",
            runtime_python=runtime.python if runtime else "",
            runtime_capabilities=list(runtime.capabilities) if runtime else [],
            model=spec.model,
            train_data=spec.train_data.path,
            validation_data=spec.validation_data.path,
            pools=[layout.PoolInfo(p.name, p.series, p.nodes, p.gpus_per_node) for p in pools],
            stage=info.stage,
        ),
    )


def entrypoint(recipe: RecipeDecl, experiment: str, stage: str = "") -> str:
    """What the capsule runs: the recipe's entrypoint; for a pipeline stage, the stage's command
    from the recipe (stage_commands, whose placeholders the runner's adapter fills in), or for
    custom/custom experiments/<exp>/<stage>.sh."""
    if stage and recipe.adapter == "custom":
        return f"experiments/{experiment}/{stage}.sh"
    if stage:
        return recipe.stage_commands[stage]
    return recipe.entrypoint.format(experiment=experiment)


def build_launch(
    info: AttemptInfo,
    spec: job_spec_pb2.JobSpec,
    pools: Sequence[job_spec_pb2.Pool],
    recipe: RecipeDecl,
    resolved_config: dict[str, object],
    image: str,
    runtime_id: str,
    assets: CapsuleAssets,
    store: BlobStore,
    *,
    public_address: str,
    public_http_url: str = "",
    public_ingest_address: str = "",
    ca_pem: str = "",
    stop_grace_seconds: int,
    datasets: Sequence[lr.ResolvedDataset] = (),
) -> lr.LaunchRequest:
    """The LaunchRequest of one attempt, without credentials (`launch_secrets.resolve_launch` adds
    them when it is sent); stores its capsule.json in `store`."""
    cj = capsule_json(info, spec, pools, recipe, resolved_config, assets)
    cj_digest = store.put_bytes(cj)
    capsule = lr.Capsule(capsule_digest=cj_digest, runner_digest=assets.runner_digest)
    for f in assets.files:
        capsule.files.add(path=f.path, sha256=f.sha256, size=f.size, executable=f.executable)
    capsule.files.add(path="capsule.json", sha256=cj_digest, size=len(cj), executable=False)
    env = dict(spec.env)
    env["FORGE_METHOD"] = recipe.name
    env["FORGE_EXPERIMENT"] = spec.experiment
    return lr.LaunchRequest(
        attempt_id=info.attempt_id,
        job_id=info.job_id,
        attempt_number=info.number,
        owner=info.owner,
        project=info.project,
        spec=spec,
        pools=list(pools),
        image=image,
        runtime_id=runtime_id,
        capsule=capsule,
        blob_source=lr.BlobSource(address=public_address, http_url=public_http_url, ca_pem=ca_pem),
        ingest=lr.IngestTarget(address=public_ingest_address or public_address, ca_pem=ca_pem),
        env=env,
        labels={LABEL_JOB: info.job_id, LABEL_ATTEMPT: info.attempt_id},
        datasets=list(datasets),
        resume=info.resume,
        stop_grace_seconds=stop_grace_seconds,
        out_key=info.out_key,
    )


def run_digests(launch: lr.LaunchRequest) -> set[str]:
    """Every blob an attempt may read with its run token."""
    digests = {f.sha256 for f in launch.capsule.files}
    digests.update(f.sha256 for f in launch.spec.workspace.files)
    for d in launch.datasets:
        digests.update(f.sha256 for f in d.manifest.files)
    return digests
