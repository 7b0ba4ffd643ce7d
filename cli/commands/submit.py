"""`sf submit`: validate locally, pack the lab from git, upload, submit, optionally follow.

This module is the flow and imports no typer: `cli.fastpath` runs it without typer's parsing. The
command's typer declaration (options, help) is `cli.commands.submit_cmd`.

The order is chosen so that the cheapest refusal comes first: flags, then experiment files,
then the token, then packing (git, secrets), and only then the network.

An unchanged lab the console admitted before is submitted by its manifest digest with unary calls
only, which `cli.fastclient` makes without importing grpcio on the fast path (docs/benchmarks.md,
**packaging**); whatever may upload, and every stream, goes through grpcio's `cli.client.Client`.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import TYPE_CHECKING, Any

from starforge_api.catalog.v1 import catalog_service_pb2
from starforge_api.control.v1 import account_service_pb2, control_service_pb2
from starforge_api.job.v1 import job_spec_pb2

from cli import spec as specmod
from cli import templates
from cli.commands.job_read import parse_pairs
from cli.context import AppState
from cli.errors import CliError
from cli.follow import exit_code_for, follow_logs, state_name
from cli.hashcache import AdmittedWorkspaces
from cli.lab import Lab
from cli.output import Output, job_to_dict
from cli.pack import ADMITTED_FILE, Pack, pack_lab
from cli.upload import UploadStats, hash_and_upload, hash_small_change, upload_files
from cli.validate import check_against_console

if TYPE_CHECKING:
    from cli.client import Client
    from cli.fastclient import ReadClient


def _upgrade_lock(
    client: Client | ReadClient, files: specmod.ExperimentFiles, framework_version: str, out: Output
) -> job_spec_pb2.RecipeLock:
    """Resolve the latest lock and rewrite recipe.lock.json (after packing: the tree stays clean).

    It takes the submission's client: asking AppState for another would close the one the rest of the
    submission goes on using."""
    old = files.lock
    lock: job_spec_pb2.RecipeLock = client.call(
        client.catalog.ResolveLock,
        catalog_service_pb2.ResolveLockRequest(
            method=old.method, framework_version=framework_version or old.framework_version
        ),
    ).lock
    files.experiment.lock_path.write_text(templates.lock_json(lock), encoding="utf-8")
    if lock.digest != old.digest or lock.framework_version != old.framework_version:
        out.warn(
            f"{files.experiment.rel(files.experiment.lock_path)} upgraded "
            f"({old.version} → {lock.version}, framework {old.framework_version} → {lock.framework_version}); "
            "commit it so the next run is traceable"
        )
    return lock


def _with_project(lab: Lab, client: Client | ReadClient) -> Lab:
    """A lab whose starforge.yaml gives only `name:` belongs to the submitting user's project."""
    if lab.settings.project:
        return lab
    who = client.call(client.accounts.WhoAmI, account_service_pb2.WhoAmIRequest())
    settings = dataclasses.replace(lab.settings, project=f"@{who.user.name}/{lab.settings.name}")
    return dataclasses.replace(lab, settings=settings)


def submit_experiment(state: AppState, opts: specmod.SubmitOptions, out: Output) -> int:
    """Run the whole submit flow; returns the exit code (non-zero only with --follow)."""
    pools, overrides = specmod.check_options(opts)
    lab = state.lab()
    files = specmod.read_experiment(lab, opts)
    specmod.observability(files.config, opts.observability_url, validate=opts.validate, tool=opts.observability_tool)
    state.require_token()  # no token: refuse before packing
    # files the hash cache does not know are hashed while they upload (hash_and_upload)
    pack = pack_lab(lab.root, lab.settings, allow_dirty=opts.allow_dirty, defer_hashing=True)
    # before the client is chosen: a lab written within the hash cache's racy window is still
    # unchanged once its few unknown files are hashed, and then needs no upload (nor grpcio)
    hash_small_change(pack)
    admitted = AdmittedWorkspaces(lab.root / ADMITTED_FILE)
    client = _client(state, pack, admitted)  # after packing: no gRPC threads alive while git is forked
    lab = _with_project(lab, client)
    for warning in pack.warnings:
        out.warn(warning)
    if opts.validate:
        specmod.check_workspace_paths(pack, opts)
        if not opts.upgrade_recipe:  # an upgrade changes the recipe the overrides are checked against
            framework_version = opts.framework_version or files.lock.framework_version
            check_against_console(
                client,
                files.lock.method,
                files.config,
                pools,
                overrides,
                framework_version,
                asked_version=opts.framework_version,
            )
    known = bool(pack.files) and not pack.unhashed
    by_digest = known and admitted.get(client.address) == pack.digest
    # an unchanged lab the console admitted before: nothing to ask about, nothing to upload
    stats = UploadStats(0, 0, len(pack.files)) if by_digest else hash_and_upload(client.streaming(), pack, out)
    out.info(stats.summary())
    if opts.upgrade_recipe:
        files.lock = _upgrade_lock(client, files, opts.framework_version, out)
    spec = specmod.build_spec(lab, files, opts, pack, pools=pools, overrides=overrides, by_digest=by_digest)
    request = control_service_pb2.SubmitJobRequest(spec=spec, request_id=str(uuid.uuid4()), dry_run=opts.dry_run)
    resp, stats = _submit_job(client, request, pack, out, stats, by_digest)
    if not opts.dry_run:
        admitted.remember(client.address, pack.digest)
    job = resp.job
    if out.json:
        doc: dict[str, Any] = {
            "job": job_to_dict(job),
            "warnings": list(resp.warnings),
            "dry_run": opts.dry_run,
            "upload": {
                "files_uploaded": stats.files_uploaded,
                "bytes_uploaded": stats.bytes_uploaded,
                "files_unchanged": stats.files_unchanged,
            },
            "workspace_digest": pack.digest,
        }
        if opts.follow and not opts.dry_run:
            out.json_line(doc)
        else:
            out.data(doc)
    else:
        for warning in resp.warnings:
            out.warn(warning)
        _print_submitted(out, job, opts)
    if not opts.follow or opts.dry_run:
        return 0
    final = follow_logs(client.streaming(), job.job_id, out, tail=0, follow=True)
    if final is not None:
        out.info(f"job {job.job_id} ended {state_name(final)}")
    return exit_code_for(final)


def _client(state: AppState, pack: Pack, admitted: AdmittedWorkspaces) -> Client | ReadClient:
    """The client for this submission: for a lab packed unchanged since the configured console
    admitted it (the submission will name it by digest), the unary one (`AppState.reader`: HTTP/2
    on the fast path); for anything else grpcio's, which the upload needs anyway."""
    if pack.files and not pack.unhashed and admitted.get(state.config().console) == pack.digest:
        return state.reader()
    return state.client()


def _submit_job(
    client: Client | ReadClient,
    request: control_service_pb2.SubmitJobRequest,
    pack: Pack,
    out: Output,
    stats: UploadStats,
    by_digest: bool,
) -> tuple[control_service_pb2.SubmitJobResponse, UploadStats]:
    """SubmitJob; `by_digest`: the workspace named by its manifest digest alone, and when the
    console no longer has it for us (another user's, a blob gone since), the files are uploaded
    and listed after all. Returns the response and what was uploaded."""
    if not by_digest:
        return client.call(client.control.SubmitJob, request), stats
    request.workspace_digest = pack.digest  # the spec lists no files (build_spec's by_digest)
    try:
        return client.call(client.control.SubmitJob, request), stats
    except CliError as err:
        if err.reason != "MISSING_BLOB":
            raise
    stats = upload_files(client.streaming(), pack.files, out)
    out.info(f"the console no longer has this workspace for you: {stats.summary()}")
    request.ClearField("workspace_digest")
    request.spec.workspace.CopyFrom(pack.manifest)
    return client.call(client.control.SubmitJob, request), stats


def _print_submitted(out: Output, job: Any, opts: specmod.SubmitOptions) -> None:
    if opts.dry_run:
        from cli import jobtext  # only a dry run's summary needs it

        out.line("dry run: the console accepted the job; nothing was queued")
        pools = ", ".join(f"{p.name or 'main'}={p.series}:{p.nodes}x{p.gpus_per_node}" for p in job.pools)
        if pools:
            out.line(f"pools: {pools}")
        if job.image:
            source = jobtext.image_source_text(job)
            out.line(f"image: {jobtext.image_text(job)}" + (f" (from {source})" if source else ""))
        if job.framework_version:
            out.line(f"framework: {jobtext.runtime_text(job)}")
        return
    line = f"submitted job {job.job_id} ({job.experiment}, {job.method}): {state_name(job.state)}"
    if job.HasField("wait") and job.wait.message:
        position = f", #{job.wait.queue_position} in queue" if job.wait.queue_position else ""
        line += f" (waiting: {job.wait.message}{position})"
    out.line(line)
    if not opts.follow:
        out.info(f"next: `sf job logs {job.job_id} -f`  ·  `sf job status {job.job_id}`")


def run_submit(state: AppState, p: dict[str, Any]) -> int:
    """`sf submit` with its parameters by name (those of `cli.commands.submit_cmd`, from typer or from
    `cli.fastpath`, which parses the same line without typer); the exit code."""
    out = state.output(p["output"])
    opts = specmod.SubmitOptions(
        experiment=p["experiment"],
        profiles=p["profile"] or [],
        overrides=p["overrides"] or [],
        model=p["model"],
        train_data=p["train_data"],
        validation_data=p["validation_data"],
        train_dataset=p["train_dataset"],
        image=p["image"],
        framework_version=p["framework_version"],
        observability_url=p["observability_url"],
        observability_tool=p["observability_tool"],
        then=p["then"] or [],
        retries=p["retries"],
        priority=p["priority"],
        queue=p["queue"],
        fleet=p["fleet"],
        allow_dirty=p["allow_dirty"],
        validate=not p["no_validate"],
        dry_run=p["dry_run"],
        upgrade_recipe=p["upgrade_recipe"],
        follow=p["follow"],
        labels=parse_pairs(p["label"] or [], "--label"),
        env=parse_pairs(p["env"] or [], "--env"),
        secrets=p["secret"] or [],
    )
    return submit_experiment(state, opts, out)
