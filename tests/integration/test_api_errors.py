"""The error contract: every status code an RPC's proto comment documents is one it returns.

Table-driven against a real console (control plane + local executor process): for each RPC of
the control plane's services (the user-facing ones, the node registry, ingest) and each code its comment (or its service's "Errors of
every RPC") documents, a request that provokes that code. `test_the_table_covers_every_documented_code`
reads the documented codes from proto/ (tools/api_reference.py), so a comment that promises a
code nobody provokes here fails, and so does a row whose code the comment does not document.

The codes every RPC shares are provoked for every RPC: UNAUTHENTICATED without a token and with
an unknown one, PERMISSION_DENIED (ErrorInfo reason TOKEN_SCOPE) with an executor token.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import pathlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pool, message_factory
from starforge_api.catalog.v1 import catalog_service_pb2 as cat
from starforge_api.control.v1 import account_service_pb2 as acc
from starforge_api.control.v1 import blob_service_pb2 as blob
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.control.v1 import dataset_service_pb2 as ds
from starforge_api.control.v1 import fleet_service_pb2 as fleet
from starforge_api.control.v1 import secret_service_pb2 as sec
from starforge_api.forgelet.v1 import node_pb2
from starforge_api.forgelet.v1 import node_registry_service_pb2 as reg
from starforge_api.forgelet.v1 import node_registry_service_pb2_grpc as reg_grpc
from starforge_api.ingest.v1 import ingest_service_pb2 as ing
from starforge_api.job.v1 import job_spec_pb2, workspace_pb2
from starforge_api.job.v1 import job_state_pb2 as st

from common.channel import bearer
from common.rpc_status import from_rpc_error
from control import auth, embedded
from control.db import models as m
from control.secrets import create_key_file
from tests.integration.console import Console, console
from tools import api_reference

SERVICES = (
    "starforge.catalog.v1.CatalogService",
    "starforge.control.v1.AccountService",
    "starforge.control.v1.BlobService",
    "starforge.control.v1.ControlService",
    "starforge.control.v1.DatasetService",
    "starforge.control.v1.FleetService",
    "starforge.control.v1.SecretService",
    "starforge.forgelet.v1.NodeRegistryService",
    "starforge.ingest.v1.IngestService",
)
# Modules imported for their descriptors (the generic rows build each RPC's request by name).
IMPORTED = (cat, acc, blob, ctl, ds, fleet, sec, reg, ing)
TRAIN = "experiments/exp/train.sh"
STREAMS_PER_USER = 2  # the main console's streams_per_user
# A job that leaves a file and a link (to a file outside its out dir) in FORGE_OUT_DIR.
WRITES_ARTIFACTS = (
    '#!/usr/bin/env bash\necho done\necho result > "$FORGE_OUT_DIR/result.txt"\n'
    'ln -s /etc/passwd "$FORGE_OUT_DIR/link"\n'
)
Metadata = tuple[tuple[str, str], ...]


@dataclasses.dataclass
class World:
    c: Console  # with a secrets key and an image allowlist
    bare: Console  # without a secrets key, with an unreachable HuggingFace Hub
    bob: Metadata  # a normal user
    executor: Metadata  # an executor token: a token of the wrong kind for every user RPC
    done_job: str  # the admin's job, SUCCEEDED
    admin_blob: str  # a blob only the admin uploaded
    run_token: Metadata  # the run token of done_job's attempt
    attempt_id: str  # done_job's attempt
    ghost: Metadata  # the node credential of node "ghost", whose registration the console lost
    # A console whose executor was stopped after running `gone_ran`; `gone_queued` was submitted
    # afterwards and never ran.
    gone: Console | None = None
    gone_ran: str = ""
    gone_queued: str = ""
    tokens: dict[str, str] = dataclasses.field(default_factory=dict)  # users the rows created

    @property
    def admin(self) -> Metadata:
        return self.c.md

    async def call(self, rpc: str, request: Any, md: Metadata | None = None, on: Console | None = None) -> None:
        """Call `rpc` ("/pkg.Service/Method") with `request` (an iterable for client streams)."""
        method = _method(rpc)
        channel = (on or self.c).channel
        kwargs: dict[str, Any] = {"request_serializer": lambda m: m.SerializeToString()}
        metadata = (on or self.c).md if md is None else md
        if method.client_streaming and method.server_streaming:
            async for _ in channel.stream_stream(rpc, **kwargs)(iter(request), metadata=metadata, timeout=30):
                pass
        elif method.client_streaming:
            await channel.stream_unary(rpc, **kwargs)(iter(request), metadata=metadata, timeout=30)
        elif method.server_streaming:
            async for _ in channel.unary_stream(rpc, **kwargs)(request, metadata=metadata, timeout=30):
                pass
        else:
            await channel.unary_unary(rpc, **kwargs)(request, metadata=metadata, timeout=30)


Provoke = Callable[[World], Awaitable[None]]


@dataclasses.dataclass(frozen=True)
class Row:
    rpc: str
    code: str
    provoke: Provoke
    reason: str = ""  # the ErrorInfo reason, when the row pins one

    @property
    def id(self) -> str:
        return f"{self.rpc.rsplit('/', 1)[-1]}-{self.code}-{self.provoke.__name__}"


def _method(rpc: str) -> Any:
    service, name = rpc.strip("/").split("/")
    return descriptor_pool.Default().FindServiceByName(service).methods_by_name[name]


def _empty_request(rpc: str) -> Any:
    return message_factory.GetMessageClass(_method(rpc).input_type)()


CONTROL = "/starforge.control.v1.ControlService/"
ACCOUNT = "/starforge.control.v1.AccountService/"
BLOB = "/starforge.control.v1.BlobService/"
DATASET = "/starforge.control.v1.DatasetService/"
FLEET = "/starforge.control.v1.FleetService/"
SECRET = "/starforge.control.v1.SecretService/"
CATALOG = "/starforge.catalog.v1.CatalogService/"
NODES = "/starforge.forgelet.v1.NodeRegistryService/"
INGEST = "/starforge.ingest.v1.IngestService/"


async def _spec(w: World, on: Console | None = None, **fields: Any) -> job_spec_pb2.JobSpec:
    c = on or w.c
    manifest = await c.upload({TRAIN: b"#!/usr/bin/env bash\necho hi\n"}, {TRAIN})
    base: dict[str, Any] = {
        "api_version": "forge/v2",
        "project": "@admin/lab",
        "experiment": "exp",
        "method": "custom/custom",
        "recipe_lock": await c.lock(),
        "config_json": json.dumps({"image": "host", "observability": "platform"}),
        "workspace": manifest,
    }
    return job_spec_pb2.JobSpec(**{**base, **fields})


def rows() -> Iterator[Row]:
    def row(rpc: str, code: str, reason: str = "") -> Callable[[Provoke], Provoke]:
        def add(f: Provoke) -> Provoke:
            table.append(Row(rpc, code, f, reason))
            return f

        return add

    table: list[Row] = []

    # CatalogService
    @row(CATALOG + "GetRecipe", "NOT_FOUND", "UNKNOWN_METHOD")
    async def unknown_recipe(w: World) -> None:
        await w.call(CATALOG + "GetRecipe", cat.GetRecipeRequest(name="nope/nope"))

    @row(CATALOG + "ResolveLock", "NOT_FOUND", "UNKNOWN_METHOD")
    async def lock_of_unknown_method(w: World) -> None:
        await w.call(CATALOG + "ResolveLock", cat.ResolveLockRequest(method="nope/nope"))

    @row(CATALOG + "ResolveLock", "INVALID_ARGUMENT")
    async def unknown_framework_version(w: World) -> None:
        await w.call(CATALOG + "ResolveLock", cat.ResolveLockRequest(method="trl/sft", framework_version="0.0.0"))

    # AccountService
    @row(ACCOUNT + "CreateToken", "INVALID_ARGUMENT")
    async def negative_ttl(w: World) -> None:
        await w.call(ACCOUNT + "CreateToken", acc.CreateTokenRequest(name="t", ttl_seconds=-1))

    @row(ACCOUNT + "CreateToken", "PERMISSION_DENIED", "FORBIDDEN")
    async def token_for_another_user(w: World) -> None:
        await w.call(ACCOUNT + "CreateToken", acc.CreateTokenRequest(name="t", user="admin"), w.bob)

    @row(ACCOUNT + "CreateToken", "NOT_FOUND")
    async def token_for_nobody(w: World) -> None:
        await w.call(ACCOUNT + "CreateToken", acc.CreateTokenRequest(name="t", user="nobody"))

    @row(ACCOUNT + "RevokeToken", "NOT_FOUND")
    async def revoke_unknown_token(w: World) -> None:
        await w.call(ACCOUNT + "RevokeToken", acc.RevokeTokenRequest(token_id="nope"), w.bob)

    @row(ACCOUNT + "CreateUser", "ALREADY_EXISTS")
    async def existing_user(w: World) -> None:
        await w.call(ACCOUNT + "CreateUser", acc.CreateUserRequest(name="bob"))

    @row(ACCOUNT + "CreateUser", "INVALID_ARGUMENT")
    async def bad_user_name(w: World) -> None:
        await w.call(ACCOUNT + "CreateUser", acc.CreateUserRequest(name="Not A Name"))

    @row(ACCOUNT + "CreateUser", "PERMISSION_DENIED")
    async def user_by_non_admin(w: World) -> None:
        await w.call(ACCOUNT + "CreateUser", acc.CreateUserRequest(name="eve"), w.bob)

    @row(ACCOUNT + "ListUsers", "PERMISSION_DENIED")
    async def users_by_non_admin(w: World) -> None:
        await w.call(ACCOUNT + "ListUsers", acc.ListUsersRequest(), w.bob)

    # BlobService
    @row(BLOB + "FindMissingBlobs", "INVALID_ARGUMENT")
    async def not_a_digest(w: World) -> None:
        await w.call(BLOB + "FindMissingBlobs", blob.FindMissingBlobsRequest(digests=["../../etc/passwd"]))

    @row(BLOB + "UploadBlobs", "INVALID_ARGUMENT")
    async def content_not_of_its_digest(w: World) -> None:
        chunk = blob.UploadBlobsRequest(digest="a" * 64, size=3, data=b"abc", finish=True)
        await w.call(BLOB + "UploadBlobs", [chunk])

    @row(BLOB + "ReadBlob", "INVALID_ARGUMENT")
    async def negative_offset(w: World) -> None:
        await w.call(BLOB + "ReadBlob", blob.ReadBlobRequest(digest=w.admin_blob, offset=-1))

    @row(BLOB + "ReadBlob", "NOT_FOUND")
    async def absent_blob(w: World) -> None:
        await w.call(BLOB + "ReadBlob", blob.ReadBlobRequest(digest="0" * 64))

    @row(BLOB + "ReadBlob", "NOT_FOUND")
    async def another_users_blob(w: World) -> None:  # the answer absent content gets: nothing to probe
        await w.call(BLOB + "ReadBlob", blob.ReadBlobRequest(digest=w.admin_blob), w.bob)

    @row(BLOB + "ReadBlob", "PERMISSION_DENIED", "TOKEN_SCOPE")
    async def blob_not_of_the_run(w: World) -> None:
        await w.call(BLOB + "ReadBlob", blob.ReadBlobRequest(digest=w.admin_blob), w.run_token)

    # ControlService
    @row(CONTROL + "SubmitJob", "INVALID_ARGUMENT", "INVALID_ARGUMENT")
    async def bad_fields(w: World) -> None:
        spec = await _spec(w, api_version="forge/v1", retry_budget=-1)
        await w.call(CONTROL + "SubmitJob", ctl.SubmitJobRequest(spec=spec))

    @row(CONTROL + "SubmitJob", "INVALID_ARGUMENT")
    async def workspace_digest_not_a_digest(w: World) -> None:
        spec = await _spec(w, workspace=workspace_pb2.WorkspaceManifest())
        await w.call(CONTROL + "SubmitJob", ctl.SubmitJobRequest(spec=spec, workspace_digest="../manifest"))

    @row(CONTROL + "SubmitJob", "INVALID_ARGUMENT")
    async def request_id_too_long(w: World) -> None:
        spec = await _spec(w)
        await w.call(CONTROL + "SubmitJob", ctl.SubmitJobRequest(spec=spec, request_id="r" * 65))

    @row(CONTROL + "SubmitJob", "INVALID_ARGUMENT")
    async def request_id_with_a_nul(w: World) -> None:
        spec = await _spec(w)
        await w.call(CONTROL + "SubmitJob", ctl.SubmitJobRequest(spec=spec, request_id="retry\x00me"))

    @row(CONTROL + "SubmitJob", "INVALID_ARGUMENT")
    async def workspace_digest_with_files(w: World) -> None:
        spec = await _spec(w)
        await w.call(CONTROL + "SubmitJob", ctl.SubmitJobRequest(spec=spec, workspace_digest="0" * 64))

    @row(CONTROL + "SubmitJob", "FAILED_PRECONDITION", "MISSING_BLOB")
    async def workspace_digest_never_admitted(w: World) -> None:
        spec = await _spec(w, workspace=workspace_pb2.WorkspaceManifest())
        await w.call(CONTROL + "SubmitJob", ctl.SubmitJobRequest(spec=spec, workspace_digest="0" * 64))

    @row(CONTROL + "SubmitJob", "NOT_FOUND", "UNKNOWN_METHOD")
    async def unknown_method(w: World) -> None:
        await w.call(CONTROL + "SubmitJob", ctl.SubmitJobRequest(spec=await _spec(w, method="nope/nope")))

    @row(CONTROL + "SubmitJob", "FAILED_PRECONDITION", "STALE_RECIPE_LOCK")
    async def stale_lock(w: World) -> None:
        spec = await _spec(w)
        spec.recipe_lock.digest = "0" * 64
        await w.call(CONTROL + "SubmitJob", ctl.SubmitJobRequest(spec=spec))

    @row(CONTROL + "SubmitJob", "PERMISSION_DENIED", "IMAGE_NOT_ALLOWED")
    async def image_not_allowed(w: World) -> None:
        spec = await _spec(w, image="docker.io/library/python:3")
        await w.call(CONTROL + "SubmitJob", ctl.SubmitJobRequest(spec=spec))

    @row(CONTROL + "SubmitJob", "RESOURCE_EXHAUSTED", "SUBMIT_RATE_LIMITED")
    async def over_the_rate(w: World) -> None:
        carol = bearer(await _user(w.c, "carol"))
        request = ctl.SubmitJobRequest(spec=await _spec(w, project="@carol/lab"))
        with pytest.raises(grpc.aio.AioRpcError):  # the one submission the burst allows, refused
            await w.call(CONTROL + "SubmitJob", request, carol)  # (workspace blobs are not carol's)
        await w.call(CONTROL + "SubmitJob", request, carol)

    @row(CONTROL + "SubmitJob", "UNAVAILABLE")
    async def hub_unreachable(w: World) -> None:
        spec = await _spec(w, w.bare, model="some-org/some-model")
        await w.call(CONTROL + "SubmitJob", ctl.SubmitJobRequest(spec=spec), on=w.bare)

    @row(CONTROL + "ListJobs", "INVALID_ARGUMENT")
    async def bad_page_token(w: World) -> None:
        await w.call(CONTROL + "ListJobs", ctl.ListJobsRequest(page_token="not-a-token"))

    job_rpcs = {
        "GetJob": ctl.GetJobRequest,
        "StopJob": ctl.StopJobRequest,
        "PauseJob": ctl.PauseJobRequest,
        "ResumeJob": ctl.ResumeJobRequest,
        "RetryJob": ctl.RetryJobRequest,
        "StreamJobLogs": ctl.StreamJobLogsRequest,
        "WatchJob": ctl.WatchJobRequest,
        "GetJobMetrics": ctl.GetJobMetricsRequest,
        "GetJobSamples": ctl.GetJobSamplesRequest,
    }
    for name, request_type in job_rpcs.items():

        def by_id(name: str, request_type: Any, job_id: Callable[[World], str], who: str = "admin") -> Provoke:
            async def provoke(w: World) -> None:
                await w.call(CONTROL + name, request_type(job_id=job_id(w)), w.bob if who == "bob" else w.admin)

            return provoke

        empty, unknown = by_id(name, request_type, lambda w: ""), by_id(name, request_type, lambda w: "j0nope")
        others = by_id(name, request_type, lambda w: w.done_job, "bob")
        empty.__name__, unknown.__name__, others.__name__ = "empty_job_id", "unknown_job", "another_users_job"
        table.append(Row(CONTROL + name, "INVALID_ARGUMENT", empty))
        table.append(Row(CONTROL + name, "NOT_FOUND", unknown))
        table.append(Row(CONTROL + name, "NOT_FOUND", others))  # never PERMISSION_DENIED: ids do not leak
        if name in ("StopJob", "PauseJob", "ResumeJob", "RetryJob"):
            finished = by_id(name, request_type, lambda w: w.done_job)
            finished.__name__ = "job_succeeded"
            table.append(Row(CONTROL + name, "FAILED_PRECONDITION", finished, "ILLEGAL_TRANSITION"))

    @row(CONTROL + "StreamJobLogs", "NOT_FOUND")
    async def earlier_lines_of_another_users_job(w: World) -> None:
        # the page-back branch checks who may read the job like the streaming one
        req = ctl.StreamJobLogsRequest(job_id=w.done_job, before_attempt_number=1, before_offset=5)
        await w.call(CONTROL + "StreamJobLogs", req, w.bob)

    @row(CONTROL + "StreamJobLogs", "RESOURCE_EXHAUSTED", "STREAM_LIMITED")
    async def logs_over_the_stream_limit(w: World) -> None:
        await _over_the_stream_limit(
            w, "erin", lambda job: w.call(CONTROL + "StreamJobLogs", _follow(job), _md(w, "erin"))
        )

    @row(CONTROL + "WatchJob", "RESOURCE_EXHAUSTED", "STREAM_LIMITED")
    async def watch_over_the_stream_limit(w: World) -> None:
        watch = ctl.WatchJobRequest
        await _over_the_stream_limit(
            w, "frank", lambda job: w.call(CONTROL + "WatchJob", watch(job_id=job), _md(w, "frank"))
        )

    @row(CONTROL + "StreamJobLogs", "INVALID_ARGUMENT")
    async def earlier_lines_followed(w: World) -> None:
        req = ctl.StreamJobLogsRequest(job_id=w.done_job, follow=True, before_attempt_number=1, before_offset=5)
        await w.call(CONTROL + "StreamJobLogs", req)

    @row(CONTROL + "StreamJobLogs", "INVALID_ARGUMENT")
    async def earlier_page_too_long(w: World) -> None:
        req = ctl.StreamJobLogsRequest(job_id=w.done_job, tail_lines=10_001, before_attempt_number=1)
        await w.call(CONTROL + "StreamJobLogs", req)

    # ControlService: artifacts (done_job left out/result.txt and out/link, a link to /etc/passwd)
    @row(CONTROL + "ListJobArtifacts", "INVALID_ARGUMENT")
    async def artifacts_page_token_climbs_out(w: World) -> None:
        await w.call(CONTROL + "ListJobArtifacts", ctl.ListJobArtifactsRequest(job_id=w.done_job, page_token="../x"))

    @row(CONTROL + "ListJobArtifacts", "NOT_FOUND")
    async def artifacts_of_an_unknown_job(w: World) -> None:
        await w.call(CONTROL + "ListJobArtifacts", ctl.ListJobArtifactsRequest(job_id="j0nope"))

    @row(CONTROL + "ListJobArtifacts", "FAILED_PRECONDITION")
    async def artifacts_of_a_job_that_never_ran(w: World) -> None:
        assert w.gone is not None
        request = ctl.ListJobArtifactsRequest(job_id=w.gone_queued)
        await w.call(CONTROL + "ListJobArtifacts", request, on=w.gone)

    @row(CONTROL + "ListJobArtifacts", "UNAVAILABLE")
    async def artifacts_on_a_stopped_executor(w: World) -> None:
        assert w.gone is not None
        await w.call(CONTROL + "ListJobArtifacts", ctl.ListJobArtifactsRequest(job_id=w.gone_ran), on=w.gone)

    @row(CONTROL + "DownloadJobArtifact", "INVALID_ARGUMENT")
    async def download_an_absolute_path(w: World) -> None:
        request = ctl.DownloadJobArtifactRequest(job_id=w.done_job, path="/etc/passwd")
        await w.call(CONTROL + "DownloadJobArtifact", request)

    @row(CONTROL + "DownloadJobArtifact", "NOT_FOUND")
    async def download_a_file_the_job_never_wrote(w: World) -> None:
        request = ctl.DownloadJobArtifactRequest(job_id=w.done_job, path="missing.txt")
        await w.call(CONTROL + "DownloadJobArtifact", request)

    @row(CONTROL + "DownloadJobArtifact", "FAILED_PRECONDITION")
    async def download_a_link(w: World) -> None:
        await w.call(CONTROL + "DownloadJobArtifact", ctl.DownloadJobArtifactRequest(job_id=w.done_job, path="link"))

    @row(CONTROL + "DownloadJobArtifact", "UNAVAILABLE")
    async def download_from_a_stopped_executor(w: World) -> None:
        assert w.gone is not None
        request = ctl.DownloadJobArtifactRequest(job_id=w.gone_ran, path="result.txt")
        await w.call(CONTROL + "DownloadJobArtifact", request, on=w.gone)

    # DatasetService
    @row(DATASET + "PushDataset", "INVALID_ARGUMENT")
    async def bad_dataset_name(w: World) -> None:
        await w.call(DATASET + "PushDataset", ds.PushDatasetRequest(name="Not A Name!", manifest=_manifest(b"x")))

    @row(DATASET + "PushDataset", "FAILED_PRECONDITION", "MISSING_BLOB")
    async def dataset_blob_never_uploaded(w: World) -> None:
        await w.call(DATASET + "PushDataset", ds.PushDatasetRequest(name="d0", manifest=_manifest(b"never sent")))

    @row(DATASET + "PushDataset", "ALREADY_EXISTS")
    async def version_with_other_content(w: World) -> None:
        for content in (b"one\n", b"two\n"):
            await w.c.upload({"data.jsonl": content}, set())
            request = ds.PushDatasetRequest(name="d1", version="v1", manifest=_manifest(content))
            await w.call(DATASET + "PushDataset", request)

    @row(DATASET + "GetDataset", "INVALID_ARGUMENT")
    async def bad_dataset_ref(w: World) -> None:
        await w.call(DATASET + "GetDataset", ds.GetDatasetRequest(ref="no-owner"))

    @row(DATASET + "GetDataset", "NOT_FOUND")
    async def unknown_dataset(w: World) -> None:
        await w.call(DATASET + "GetDataset", ds.GetDatasetRequest(ref="admin/nope"))

    # FleetService
    for name, request_type in {
        "DrainFleet": fleet.DrainFleetRequest,
        "UndrainFleet": fleet.UndrainFleetRequest,
    }.items():

        def drain(name: str, request_type: Any, fleet_name: str, who: str) -> Provoke:
            async def provoke(w: World) -> None:
                await w.call(FLEET + name, request_type(fleet=fleet_name), w.bob if who == "bob" else w.admin)

            provoke.__name__ = f"{fleet_name}_by_{who}"
            return provoke

        table.append(Row(FLEET + name, "NOT_FOUND", drain(name, request_type, "nope", "admin")))
        table.append(Row(FLEET + name, "PERMISSION_DENIED", drain(name, request_type, "local", "bob")))

    # SecretService
    secret_requests: dict[str, Callable[..., Any]] = {
        "SetSecret": lambda **k: sec.SetSecretRequest(value="v", **k),
        "ListSecrets": lambda **k: sec.ListSecretsRequest(**{f: v for f, v in k.items() if f == "project"}),
        "DeleteSecret": sec.DeleteSecretRequest,
    }
    for name, make in secret_requests.items():

        def secret(name: str, make: Callable[..., Any], case: str) -> Provoke:
            async def provoke(w: World) -> None:
                if case == "bad_name":
                    bad = {"project": "not-a-project"} if name == "ListSecrets" else {"name": "no spaces"}
                    await w.call(SECRET + name, make(**bad))
                elif case == "another_users_project":
                    await w.call(SECRET + name, make(name="KEY", project="@admin/lab"), w.bob)
                elif case == "no_secrets_key":
                    await w.call(SECRET + name, make(name="KEY"), on=w.bare)
                else:
                    await w.call(SECRET + name, make(name="NEVER_SET"))

            provoke.__name__ = case
            return provoke

        table.append(Row(SECRET + name, "INVALID_ARGUMENT", secret(name, make, "bad_name"), "BAD_SECRET"))
        table.append(Row(SECRET + name, "PERMISSION_DENIED", secret(name, make, "another_users_project")))
        table.append(
            Row(SECRET + name, "FAILED_PRECONDITION", secret(name, make, "no_secrets_key"), "SECRETS_DISABLED")
        )
        if name == "DeleteSecret":
            table.append(Row(SECRET + name, "NOT_FOUND", secret(name, make, "unknown"), "UNKNOWN_SECRET"))

    # NodeRegistryService
    @row(NODES + "RegisterNode", "INVALID_ARGUMENT")
    async def node_without_address(w: World) -> None:
        token = await _join_token(w, "n-noaddr")
        await w.call(NODES + "RegisterNode", reg.RegisterNodeRequest(node=node_pb2.Node(name="n-noaddr")), token)

    @row(NODES + "RegisterNode", "PERMISSION_DENIED", "NODE_IDENTITY")
    async def register_as_another_node(w: World) -> None:
        token = await _join_token(w, "n-mine")
        node = node_pb2.Node(name="n-other", fleet="spare", address="127.0.0.1:1")
        await w.call(NODES + "RegisterNode", reg.RegisterNodeRequest(node=node), token)

    @row(NODES + "RegisterNode", "UNAUTHENTICATED", "JOIN_TOKEN_USED")
    async def join_token_used_twice(w: World) -> None:
        token = await _join_token(w, "n-twice")
        node = node_pb2.Node(name="n-twice", fleet="spare", address="127.0.0.1:1")
        await w.call(NODES + "RegisterNode", reg.RegisterNodeRequest(node=node), token)  # accepted
        await w.call(NODES + "RegisterNode", reg.RegisterNodeRequest(node=node), token)

    @row(NODES + "Heartbeat", "NOT_FOUND")
    async def heartbeat_of_a_forgotten_node(w: World) -> None:
        await w.call(NODES + "Heartbeat", reg.HeartbeatRequest(name="ghost"), w.ghost)

    @row(NODES + "Heartbeat", "PERMISSION_DENIED", "NODE_IDENTITY")
    async def heartbeat_for_another_node(w: World) -> None:
        await w.call(NODES + "Heartbeat", reg.HeartbeatRequest(name="n-other"), w.ghost)

    @row(NODES + "ListNodes", "PERMISSION_DENIED", "FORBIDDEN")
    async def nodes_by_non_admin(w: World) -> None:
        await w.call(NODES + "ListNodes", reg.ListNodesRequest(), w.bob)

    @row(NODES + "ListNodes", "PERMISSION_DENIED", "FORBIDDEN")
    async def another_fleet_by_executor(w: World) -> None:
        await w.call(NODES + "ListNodes", reg.ListNodesRequest(fleet="spare"), w.executor)

    for name, request_type in {"DrainNode": reg.DrainNodeRequest, "UndrainNode": reg.UndrainNodeRequest}.items():

        def node_op(name: str, request_type: Any, node: str, who: str) -> Provoke:
            async def provoke(w: World) -> None:
                md = {"admin": w.admin, "bob": w.bob, "ghost": w.ghost}[who]
                await w.call(NODES + name, request_type(name=node), md)

            provoke.__name__ = f"{node}_by_{who}"
            return provoke

        table.append(Row(NODES + name, "NOT_FOUND", node_op(name, request_type, "nope", "admin")))
        table.append(Row(NODES + name, "PERMISSION_DENIED", node_op(name, request_type, "ghost", "bob"), "FORBIDDEN"))
        table.append(
            Row(NODES + name, "PERMISSION_DENIED", node_op(name, request_type, "n-other", "ghost"), "NODE_IDENTITY")
        )

    @row(NODES + "CreateJoinToken", "INVALID_ARGUMENT")
    async def join_token_bad_name(w: World) -> None:
        await w.call(NODES + "CreateJoinToken", reg.CreateJoinTokenRequest(node="no spaces", fleet="spare"))

    @row(NODES + "CreateJoinToken", "PERMISSION_DENIED", "FORBIDDEN")
    async def join_token_by_non_admin(w: World) -> None:
        await w.call(NODES + "CreateJoinToken", reg.CreateJoinTokenRequest(node="n9", fleet="spare"), w.bob)

    @row(NODES + "CreateExecutorToken", "INVALID_ARGUMENT")
    async def executor_token_without_fleet(w: World) -> None:
        await w.call(NODES + "CreateExecutorToken", reg.CreateExecutorTokenRequest(fleet=""))

    @row(NODES + "CreateExecutorToken", "PERMISSION_DENIED", "FORBIDDEN")
    async def executor_token_by_non_admin(w: World) -> None:
        await w.call(NODES + "CreateExecutorToken", reg.CreateExecutorTokenRequest(fleet="spare"), w.bob)

    # IngestService (a job's run token)
    @row(INGEST + "Report", "INVALID_ARGUMENT")
    async def report_without_attempt(w: World) -> None:
        await w.call(INGEST + "Report", [ing.ReportRequest()], w.run_token)

    @row(INGEST + "Report", "PERMISSION_DENIED", "TOKEN_SCOPE")
    async def report_for_another_attempt(w: World) -> None:
        await w.call(INGEST + "Report", [ing.ReportRequest(attempt_id="j0other.1")], w.run_token)

    @row(INGEST + "Report", "RESOURCE_EXHAUSTED", "MESSAGE_TOO_LARGE")
    async def report_over_the_message_limit(w: World) -> None:
        big = ing.ReportRequest(attempt_id=w.attempt_id)
        big.records.add(seq=1).log_chunk.lines.append("x" * (5 << 20))
        await w.call(INGEST + "Report", [big], w.run_token)

    @row(INGEST + "GetCursor", "PERMISSION_DENIED", "TOKEN_SCOPE")
    async def cursor_of_another_attempt(w: World) -> None:
        await w.call(INGEST + "GetCursor", ing.GetCursorRequest(attempt_id="j0other.1"), w.run_token)

    # Every RPC: no token, an unknown token, a token of another kind.
    for rpc in sorted(api_reference.documented_errors()):
        if not rpc.strip("/").startswith(SERVICES):
            continue
        table.append(Row(rpc, "UNAUTHENTICATED", _generic(rpc, "no_token"), "BAD_TOKEN"))
        table.append(Row(rpc, "UNAUTHENTICATED", _generic(rpc, "unknown_token"), "BAD_TOKEN"))
        if rpc != BLOB + "ReadBlob":  # run and executor tokens may read blobs: rows above
            wrong = "executor_token" if rpc.startswith(INGEST) else "run_token"
            table.append(Row(rpc, "PERMISSION_DENIED", _generic(rpc, wrong), "TOKEN_SCOPE"))
    yield from table


def _generic(rpc: str, case: str) -> Provoke:
    async def provoke(w: World) -> None:
        md = {
            "no_token": (),
            "unknown_token": bearer("sf_pat_unknown0123456789"),
            "executor_token": w.executor,
            "run_token": w.run_token,
        }[case]
        # These are refused on the metadata alone, before a message is read. A client stream sends
        # none: grpc.aio reports a write that races the server's early status as INTERNAL ("Failed
        # execute_batch") instead of the status the server sent.
        await w.call(rpc, [] if _method(rpc).client_streaming else _empty_request(rpc), md)

    provoke.__name__ = case
    return provoke


def _manifest(content: bytes) -> workspace_pb2.WorkspaceManifest:
    return workspace_pb2.WorkspaceManifest(
        files=[
            workspace_pb2.WorkspaceFile(
                path="data.jsonl", sha256=hashlib.sha256(content).hexdigest(), size=len(content)
            )
        ]
    )


async def _join_token(w: World, node: str) -> Metadata:
    r = await reg_grpc.NodeRegistryServiceStub(w.c.channel).CreateJoinToken(
        reg.CreateJoinTokenRequest(node=node, fleet="spare"), metadata=w.admin, timeout=30
    )
    return bearer(r.token)


def _follow(job_id: str) -> ctl.StreamJobLogsRequest:
    return ctl.StreamJobLogsRequest(job_id=job_id, follow=True, tail_lines=1)


def _md(w: World, user: str) -> Metadata:
    return bearer(w.tokens[user])


async def _over_the_stream_limit(w: World, user: str, one_more: Callable[[str], Awaitable[None]]) -> None:
    """`user` (new) runs a job and holds STREAMS_PER_USER follows of it, each with a line (so the
    console counts them); then `one_more(job_id)` is refused. The follows and the job end after."""
    w.tokens[user] = await _user(w.c, user)
    as_user = dataclasses.replace(w.c, token=w.tokens[user], extra={**w.c.extra, "user": user})
    job = (await as_user.submit_custom("#!/usr/bin/env bash\necho ready\nsleep 120\n")).job_id
    held = []
    try:
        for _ in range(STREAMS_PER_USER):
            call = w.c.jobs.StreamJobLogs(_follow(job), metadata=_md(w, user))
            held.append(call)
            while not (await asyncio.wait_for(call.read(), 30)).lines:
                pass
        await one_more(job)
    finally:
        for call in held:
            call.cancel()
        await w.c.jobs.StopJob(ctl.StopJobRequest(job_id=job), metadata=w.admin)


async def _user(c: Console, name: str) -> str:
    r = await c.channel.unary_unary(
        ACCOUNT + "CreateUser",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=acc.CreateUserResponse.FromString,
    )(acc.CreateUserRequest(name=name), metadata=c.md, timeout=30)
    return str(r.token)


TABLE = list(rows())


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    root = tmp_path_factory.mktemp("api-errors")
    key = root / "secrets.key"
    create_key_file(key)
    async with (
        console(
            root / "main",
            secrets_key_file=key,
            image_allowlist=["registry.starforge.dev/"],
            hf_precheck=False,
            submit_rate_per_user=0.001,
            submit_burst_per_user=1,
            streams_per_user=STREAMS_PER_USER,
        ) as c,
        # No secrets key; a HuggingFace endpoint where nothing listens (a closed loopback port).
        console(root / "bare", hf_endpoint="http://127.0.0.1:9") as bare,
        console(root / "gone") as gone,
    ):
        bob = bearer(await _user(c, "bob"))
        executor_token = await reg_grpc.NodeRegistryServiceStub(c.channel).CreateExecutorToken(
            reg.CreateExecutorTokenRequest(fleet="local"), metadata=c.md, timeout=30
        )
        job = await c.submit_custom(WRITES_ARTIFACTS)
        await c.wait(job.job_id, st.JOB_STATE_SUCCEEDED)
        ran = await gone.submit_custom(WRITES_ARTIFACTS)
        await gone.wait(ran.job_id, st.JOB_STATE_SUCCEEDED)
        assert gone.executor is not None
        embedded.stop_process(gone.executor)  # its fleet stays known: the next job waits, never runs
        queued = await gone.submit_custom(WRITES_ARTIFACTS)
        private = await c.upload({"only-admin.txt": b"the admin's own bytes\n"}, set())
        attempt = (await c.get(job.job_id)).attempts[0].attempt_id
        run_token = await c.app.ctx.db.run(lambda s: auth.issue_run_token(s, "admin", job.job_id, attempt))
        world = World(
            c,
            bare,
            bob,
            bearer(executor_token.token),
            job.job_id,
            private.files[0].sha256,
            bearer(run_token),
            attempt,
            (),
        )
        # A node that registered, then was forgotten by the console (as after a database restore).
        ghost = node_pb2.Node(name="ghost", fleet="spare", address="127.0.0.1:1")
        registered = await reg_grpc.NodeRegistryServiceStub(c.channel).RegisterNode(
            reg.RegisterNodeRequest(node=ghost), metadata=await _join_token(world, "ghost"), timeout=30
        )
        await c.app.ctx.db.run(lambda s: s.delete(s.get(m.Node, "ghost")))
        world.ghost = bearer(registered.node_token)
        world.gone, world.gone_ran, world.gone_queued = gone, ran.job_id, queued.job_id
        yield world


def test_the_table_covers_every_documented_code() -> None:
    documented = {
        (rpc, code)
        for rpc, codes in api_reference.documented_errors().items()
        if rpc.strip("/").startswith(SERVICES)
        for code in codes
    }
    provoked = {(r.rpc, r.code) for r in TABLE}
    assert sorted(documented - provoked) == [], "documented but never provoked"
    assert sorted(provoked - documented) == [], "provoked but not documented"


@pytest.mark.parametrize("row", TABLE, ids=lambda r: r.id)
async def test_each_documented_code_is_returned(world: World, row: Row) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await row.provoke(world)
    assert info.value.code().name == row.code, info.value
    details = info.value.details() or ""
    assert details and "Traceback" not in details
    if row.reason:
        assert from_rpc_error(info.value).reason_name == row.reason, info.value


def test_rows_name_real_rpcs() -> None:
    for r in TABLE:
        assert _method(r.rpc).full_name == r.rpc.strip("/").replace("/", ".")
    assert pathlib.Path(api_reference.OUTPUT).name == "api-reference.md"


async def test_field_violations_name_request_fields(world: World) -> None:
    """BadRequest paths are fields of the request message, in proto terms."""
    cases = [
        (DATASET + "GetDataset", ds.GetDatasetRequest(ref="no-owner"), ["ref"]),
        (CONTROL + "ListJobs", ctl.ListJobsRequest(page_token="not-a-token"), ["page_token"]),
        (CONTROL + "GetJob", ctl.GetJobRequest(), ["job_id"]),
        (
            CONTROL + "SubmitJob",
            ctl.SubmitJobRequest(spec=await _spec(world, train_data=job_spec_pb2.DataRef(dataset="no-owner"))),
            ["spec.train_data.dataset"],
        ),
    ]
    for rpc, request, fields in cases:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await world.call(rpc, request)
        assert [v.field for v in from_rpc_error(info.value).field_violations] == fields, rpc
