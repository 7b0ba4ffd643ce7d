"""Bad input over the wire, fuzzed with hypothesis, against real servers: a console (control plane
+ local executor process) and a forgelet process (process runtime), all on loopback.

- Every RPC of every service (ControlService, IngestService, BlobService, CatalogService,
  AccountService, FleetService, DatasetService, NodeRegistryService on the console;
  ExecutorService on the executor; ForgeletService on forgelet) is called with random request
  messages built from its descriptor, with a valid token (an admin's; a run token of a real job
  for IngestService, with its attempt id half the time): the answer is a clean status, never
  INTERNAL or UNKNOWN (an escaped exception), and nothing is written outside the servers' own
  state directories.
- SubmitJob with random JobSpecs (mutations of a valid one) over gRPC: only INVALID_ARGUMENT,
  FAILED_PRECONDITION, NOT_FOUND or PERMISSION_DENIED (or OK for a valid one).
- `sf` against the live console with random arguments: exit codes 0-5, no traceback.
- UploadBlobs, the "zip bomb" of this transport: a declared size over the limit, a size much
  larger than the data, more data than declared, and a stream that never finishes are all refused
  without a byte left on disk (no temporary file, no blob).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import pathlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import grpc
import pytest
from google.protobuf.descriptor import Descriptor, MethodDescriptor, ServiceDescriptor
from hypothesis import given
from hypothesis import strategies as st
from starforge_api.catalog.v1 import catalog_service_pb2
from starforge_api.control.v1 import (
    account_service_pb2,
    blob_service_pb2,
    control_service_pb2,
    dataset_service_pb2,
    fleet_service_pb2,
    secret_service_pb2,
)
from starforge_api.control.v1 import blob_service_pb2 as blob
from starforge_api.control.v1 import blob_service_pb2_grpc as blob_grpc
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.control.v1 import control_service_pb2_grpc as ctl_grpc
from starforge_api.executor.v1 import executor_service_pb2
from starforge_api.forgelet.v1 import forgelet_service_pb2, node_registry_service_pb2
from starforge_api.ingest.v1 import ingest_service_pb2
from starforge_api.ingest.v1 import ingest_service_pb2 as ingest_pb
from starforge_api.ingest.v1 import ingest_service_pb2_grpc as ingest_grpc
from starforge_api.job.v1 import job_spec_pb2
from starforge_api.job.v1 import job_state_pb2 as st_pb
from typer.testing import CliRunner

from cli.main import app
from common.channel import bearer
from common.hashing import MAX_BLOB_BYTES
from control import auth
from tests.integration.console import EXECUTOR_TOKEN, console
from tests.integration.forgelet.fleet import FORGELET_TOKEN, ForgeletProcess, join_token
from tests.reliability.fuzzing import fuzz_settings, message_class, messages, mutated, text
from tests.reliability.test_fuzz_inputs import argv

OPTIONS = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]
CLEAN = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.UNAVAILABLE,  # a dependency (an executor, a blob source) is away: said so
}
ADMISSION_REFUSALS = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.PERMISSION_DENIED,
}


@dataclass
class Servers:
    root: pathlib.Path
    console: str
    token: str
    run_token: str
    executor: str
    forgelet: str
    job_id: str
    spec: job_spec_pb2.JobSpec
    blob_dir: pathlib.Path
    state_dirs: tuple[pathlib.Path, ...]

    def __repr__(self) -> str:
        return "Servers()"


class _Background:
    """The console (and forgelet) run on their own event loop in a thread; tests call them with
    blocking gRPC, as any client would."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.ready = threading.Event()
        self.loop = asyncio.new_event_loop()
        self.stop: asyncio.Event | None = None
        self.servers: Servers | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.loop.run_until_complete(self._main())
        except BaseException as e:
            self.error = e
            self.ready.set()

    async def _main(self) -> None:
        self.stop = asyncio.Event()
        async with console(self.root) as c:
            job = await c.submit_custom("#!/usr/bin/env bash\necho fuzz target\n")
            await c.wait(job.job_id, st_pb.JOB_STATE_SUCCEEDED, timeout=60)
            spec = (await c.get(job.job_id)).spec
            # a run token of that job, so IngestService is fuzzed past its scope check
            run_token, _ = await c.app.ctx.db.run(
                lambda s: auth.issue_token(
                    s, "admin", "run", name="fuzz", job_id=job.job_id, attempt_id=f"{job.job_id}.1"
                )
            )
            joining = await join_token(c, "fz")
            node = ForgeletProcess("fz", self.root / "forgelet", c.address, joining, runtime="process", gpus=2)
            await asyncio.to_thread(node.start)
            try:
                self.servers = Servers(
                    root=self.root,
                    console=c.address,
                    token=c.token,
                    run_token=run_token,
                    executor=c.executor_address,
                    forgelet=node.address,
                    job_id=job.job_id,
                    spec=spec,
                    blob_dir=c.app.ctx.cfg.resolved_blob_dir,
                    state_dirs=(self.root / "console", self.root / "executor", self.root / "forgelet"),
                )
                self.ready.set()
                await self.stop.wait()
            finally:
                await asyncio.to_thread(node.stop)

    def __enter__(self) -> Servers:
        self.thread.start()
        self.ready.wait(120)
        if self.error is not None or self.servers is None:
            raise RuntimeError(f"fuzz servers did not start: {self.error!r}")
        return self.servers

    def __exit__(self, *exc: object) -> None:
        if self.stop is not None:
            self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(60)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    with _Background(tmp_path_factory.mktemp("fuzz-servers")) as s:
        yield s


def _outside(s: Servers) -> set[str]:
    """Everything under the servers' root that is not one of their state dirs (nothing may appear)."""
    out = set()
    for dirpath, dirnames, filenames in os.walk(s.root):
        here = pathlib.Path(dirpath)
        dirnames[:] = [d for d in dirnames if here / d not in s.state_dirs]
        out |= {str(here / n) for n in dirnames + filenames}
    return out


# -- every RPC ------------------------------------------------------------------------------

SERVICES: list[tuple[str, ServiceDescriptor]] = [
    ("console", control_service_pb2.DESCRIPTOR.services_by_name["ControlService"]),
    ("console", ingest_service_pb2.DESCRIPTOR.services_by_name["IngestService"]),
    ("console", blob_service_pb2.DESCRIPTOR.services_by_name["BlobService"]),
    ("console", catalog_service_pb2.DESCRIPTOR.services_by_name["CatalogService"]),
    ("console", account_service_pb2.DESCRIPTOR.services_by_name["AccountService"]),
    ("console", fleet_service_pb2.DESCRIPTOR.services_by_name["FleetService"]),
    ("console", dataset_service_pb2.DESCRIPTOR.services_by_name["DatasetService"]),
    ("console", node_registry_service_pb2.DESCRIPTOR.services_by_name["NodeRegistryService"]),
    ("console", secret_service_pb2.DESCRIPTOR.services_by_name["SecretService"]),
    ("executor", executor_service_pb2.DESCRIPTOR.services_by_name["ExecutorService"]),
    ("forgelet", forgelet_service_pb2.DESCRIPTOR.services_by_name["ForgeletService"]),
]
METHODS = [(where, m) for where, svc in SERVICES for m in svc.methods]


def test_every_service_method_is_fuzzed() -> None:
    """The list above is every service of the contract (a new service must be added here)."""
    root = pathlib.Path(__file__).resolve().parents[2] / "proto"
    declared = set()
    for proto in root.rglob("*.proto"):
        package = next(
            (ln.split()[1].rstrip(";") for ln in proto.read_text().splitlines() if ln.startswith("package ")), ""
        )
        declared |= {f"{package}.{ln.split()[1]}" for ln in proto.read_text().splitlines() if ln.startswith("service ")}
    assert declared == {svc.full_name for _, svc in SERVICES}


def _loopback_only(request: Any) -> None:
    """A random LaunchRequest must not make the executor dial the world (DNS, random hosts)."""
    launch = request.launch if request.DESCRIPTOR.name == "StartAttemptRequest" else request
    if launch.DESCRIPTOR.name == "LaunchRequest":
        launch.blob_source.address = "127.0.0.1:9"  # discard port: nothing listens
        launch.blob_source.http_url = "http://127.0.0.1:9"
        launch.ingest.address = "127.0.0.1:9"


def _call(s: Servers, where: str, method: MethodDescriptor, requests: list[Any]) -> grpc.StatusCode:
    ingest = method.containing_service.name == "IngestService"
    address, md = {
        "console": (s.console, bearer(s.run_token if ingest else s.token)),
        "executor": (s.executor, bearer(EXECUTOR_TOKEN)),
        "forgelet": (s.forgelet, bearer(FORGELET_TOKEN)),
    }[where]
    path = f"/{method.containing_service.full_name}/{method.name}"
    resp_cls = message_class(method.output_type)
    kw = {"request_serializer": lambda m: m.SerializeToString(), "response_deserializer": resp_cls.FromString}
    streaming = method.server_streaming
    timeout = 3.0 if streaming else 10.0
    with grpc.insecure_channel(address, options=OPTIONS) as ch:
        try:
            if method.client_streaming and streaming:
                for _ in ch.stream_stream(path, **kw)(iter(requests), metadata=md, timeout=timeout):
                    pass
            elif method.client_streaming:
                ch.stream_unary(path, **kw)(iter(requests), metadata=md, timeout=timeout)
            elif streaming:
                for _ in ch.unary_stream(path, **kw)(requests[0], metadata=md, timeout=timeout):
                    pass
            else:
                ch.unary_unary(path, **kw)(requests[0], metadata=md, timeout=timeout)
        except grpc.RpcError as e:
            code: grpc.StatusCode = e.code()
            details = e.details() or ""
        else:
            return grpc.StatusCode.OK
    if code == grpc.StatusCode.DEADLINE_EXCEEDED and streaming:
        return grpc.StatusCode.OK  # a follow that had nothing more to say
    assert code in CLEAN, f"{path}: {code.name}: {details}"
    assert "Traceback" not in details
    return code


# Mutating admin calls that would change what the fuzz runs with (revoke its own token, drain
# every fleet) are fuzzed too; the fixture's token and fleets are restored by their own checks.
@pytest.mark.parametrize(
    ("where", "method"), METHODS, ids=[f"{m.containing_service.name}.{m.name}" for _, m in METHODS]
)
@fuzz_settings(12)
@given(data=st.data())
def test_every_rpc_refuses_random_requests_cleanly(
    servers: Servers, where: str, method: MethodDescriptor, data: st.DataObject
) -> None:
    before = _outside(servers)
    n = data.draw(st.integers(1, 3)) if method.client_streaming else 1
    requests = [data.draw(messages(method.input_type)) for _ in range(n)]
    for r in requests:
        _loopback_only(r)
        if data.draw(st.booleans()):  # sometimes about things that exist
            for name in ("job_id", "attempt_id"):
                if name in r.DESCRIPTOR.fields_by_name:
                    setattr(r, name, servers.job_id if name == "job_id" else servers.job_id + ".1")
    _call(servers, where, method, requests)
    assert _outside(servers) == before, f"{method.full_name} wrote outside the servers' state dirs"


# -- ingest, past the sequence check --------------------------------------------------------


@fuzz_settings(60)
@given(data=st.data())
def test_ingest_stores_or_refuses_random_records_cleanly(servers: Servers, data: st.DataObject) -> None:
    """Records with the right sequence numbers and random bodies (NaN and infinite metrics, odd
    steps, huge lines, bad timestamps) reach the store; lifecycle events for the ended attempt
    are refused cleanly (PERMISSION_DENIED: an ended attempt's outcome is final)."""
    attempt_id = servers.job_id + ".1"
    md = bearer(servers.run_token)
    with grpc.insecure_channel(servers.console, options=OPTIONS) as ch:
        stub = ingest_grpc.IngestServiceStub(ch)
        acked = stub.GetCursor(ingest_pb.GetCursorRequest(attempt_id=attempt_id), metadata=md, timeout=10).acked_seq
        records = cast(
            list[ingest_pb.Record],
            data.draw(st.lists(messages(cast(Descriptor, ingest_pb.Record.DESCRIPTOR)), min_size=1, max_size=4)),
        )
        for i, r in enumerate(records):
            r.seq = acked + 1 + i
        try:
            for _ in stub.Report(
                iter([ingest_pb.ReportRequest(attempt_id=attempt_id, records=records)]), metadata=md, timeout=10
            ):
                pass
        except grpc.RpcError as e:
            refused = (e.code(), e.details())
        else:
            return
    assert refused[0] in CLEAN, refused


NAN_TRAIN = b"""#!/usr/bin/env bash
python3 - <<'PY'
import starforge
starforge.report(step=1, loss=1.0)
starforge.report(step=2, loss=float("nan"))
starforge.report(step=3, loss=float("inf"))
for i in range(1, 6):
    print(f"after nan {i}", flush=True)
PY
"""


def test_a_job_reporting_nan_keeps_its_logs_and_ends(servers: Servers) -> None:
    """Found by the ingest fuzz: a NaN metric (a diverged loss) made SQLite refuse the whole batch,
    so the capsule's journal stuck there: no later line, metric or exit was ever stored."""
    digest = hashlib.sha256(NAN_TRAIN).hexdigest()
    spec = job_spec_pb2.JobSpec()
    spec.CopyFrom(servers.spec)
    del spec.workspace.files[:]
    spec.workspace.files.add(path="experiments/exp/train.sh", sha256=digest, size=len(NAN_TRAIN), executable=True)
    # Other files than the copied spec's: its digest and size no longer hold; the server fills them.
    spec.workspace.digest, spec.workspace.total_bytes = "", 0
    md = bearer(servers.token)
    assert _upload(
        servers, [blob.UploadBlobsRequest(digest=digest, size=len(NAN_TRAIN), data=NAN_TRAIN, finish=True)]
    ) == (grpc.StatusCode.OK)
    with grpc.insecure_channel(servers.console, options=OPTIONS) as ch:
        stub = ctl_grpc.ControlServiceStub(ch)
        job_id = stub.SubmitJob(ctl.SubmitJobRequest(spec=spec), metadata=md, timeout=10).job.job_id
        deadline = time.monotonic() + 60
        while (job := stub.GetJob(ctl.GetJobRequest(job_id=job_id), metadata=md, timeout=10).job).state not in (
            st_pb.JOB_STATE_SUCCEEDED,
            st_pb.JOB_STATE_FAILED,
        ):
            assert time.monotonic() < deadline, job
            time.sleep(0.2)
        lines = [
            ln.text for r in stub.StreamJobLogs(ctl.StreamJobLogsRequest(job_id=job_id), metadata=md) for ln in r.lines
        ]
        series = stub.GetJobMetrics(ctl.GetJobMetricsRequest(job_id=job_id, names=["loss"]), metadata=md).series
    assert job.state == st_pb.JOB_STATE_SUCCEEDED, job
    assert [ln for ln in lines if ln.startswith("after nan")] == [f"after nan {i}" for i in range(1, 6)]
    assert "starforge: metric value NaN not stored: loss at step 2" in lines
    assert [(p.step, p.value) for s in series for p in s.points] == [(1, 1.0), (3, float("inf"))]


# -- SubmitJob ------------------------------------------------------------------------------


@fuzz_settings(60)
@given(data=st.data())
def test_submit_job_refuses_random_specs_cleanly(servers: Servers, data: st.DataObject) -> None:
    spec = data.draw(mutated(servers.spec))
    with grpc.insecure_channel(servers.console, options=OPTIONS) as ch:
        try:
            ctl_grpc.ControlServiceStub(ch).SubmitJob(
                ctl.SubmitJobRequest(spec=cast(job_spec_pb2.JobSpec, spec), dry_run=True, request_id=data.draw(text())),
                metadata=bearer(servers.token),
                timeout=10,
            )
        except grpc.RpcError as e:
            refused = (e.code(), e.details())
        else:
            return
    assert refused[0] in ADMISSION_REFUSALS, refused


# -- sf against the live console ------------------------------------------------------------


@fuzz_settings(80)
@given(args=argv())
def test_sf_against_a_live_console_exits_cleanly(
    servers: Servers, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    if any(a in ("-f", "--follow", "watch") for a in args):
        return  # following a running job waits for it by design
    monkeypatch.chdir(tmp_path)
    env = {
        "HOME": str(tmp_path),
        "STARFORGE_CONSOLE": servers.console,
        "STARFORGE_TOKEN": servers.token,
        "STARFORGE_CLIENT_CONFIG": str(tmp_path / "client.yaml"),
        "NO_COLOR": "1",
    }
    result = CliRunner().invoke(app, args, env=env, input="")
    assert result.exit_code in (0, 1, 2, 3, 4, 5, 130), (args, result.exit_code, result.output)
    assert "Traceback" not in result.output and "failed unexpectedly" not in result.output, (args, result.output)


# -- UploadBlobs: zip bombs of this transport -----------------------------------------------


def _upload(
    s: Servers, chunks: list[blob.UploadBlobsRequest], *, idle_after: float = 0.0, timeout: float = 10.0
) -> grpc.StatusCode:
    def gen() -> Iterator[blob.UploadBlobsRequest]:
        yield from chunks
        if idle_after:
            time.sleep(idle_after)  # the stream stays open, saying nothing, until the deadline

    with grpc.insecure_channel(s.console, options=OPTIONS) as ch:
        try:
            blob_grpc.BlobServiceStub(ch).UploadBlobs(gen(), metadata=bearer(s.token), timeout=timeout)
        except grpc.RpcError as e:
            return e.code()
    return grpc.StatusCode.OK


def _store_state(s: Servers) -> tuple[list[str], int]:
    tmp = sorted(p.name for p in (s.blob_dir / "tmp").iterdir())
    used = sum(p.stat().st_size for p in s.blob_dir.rglob("*") if p.is_file())
    return tmp, used


def _gone(s: Servers, digest: str) -> bool:
    return not (s.blob_dir / digest[:2] / digest).exists()


def test_upload_bombs_are_refused_without_filling_the_disk(servers: Servers) -> None:
    data = os.urandom(1 << 20)
    digest = hashlib.sha256(data).hexdigest()
    tmp_before, used_before = _store_state(servers)
    assert tmp_before == []
    # a declared size over the limit: refused before a byte is stored
    assert _upload(servers, [blob.UploadBlobsRequest(digest=digest, size=MAX_BLOB_BYTES + 1, data=data)]) == (
        grpc.StatusCode.INVALID_ARGUMENT
    )
    # a size much larger than the data (1 TiB declared, 1 MiB sent, finish): refused at finish
    assert _upload(servers, [blob.UploadBlobsRequest(digest=digest, size=1 << 40, data=data, finish=True)]) == (
        grpc.StatusCode.INVALID_ARGUMENT
    )
    # more data than declared: refused at the first byte over
    over = [
        blob.UploadBlobsRequest(digest=digest, size=1000, data=data[:600]),
        blob.UploadBlobsRequest(digest=digest, data=data[600:1200]),
    ]
    assert _upload(servers, over) == grpc.StatusCode.INVALID_ARGUMENT
    # content that is not what its digest says
    assert _upload(servers, [blob.UploadBlobsRequest(digest="0" * 64, size=len(data), data=data, finish=True)]) == (
        grpc.StatusCode.INVALID_ARGUMENT
    )
    # a stream that never finishes: the client's deadline ends it, the server drops the partial blob
    started = time.monotonic()
    code = _upload(
        servers, [blob.UploadBlobsRequest(digest=digest, size=len(data) * 4, data=data)], idle_after=4, timeout=2
    )
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED and time.monotonic() - started < 10
    deadline = time.monotonic() + 10
    while _store_state(servers)[0] and time.monotonic() < deadline:
        time.sleep(0.1)
    tmp_after, used_after = _store_state(servers)
    assert tmp_after == [], "a refused upload left a temporary file"
    assert used_after - used_before < 1 << 20, "refused uploads grew the blob store"
    assert _gone(servers, digest) and _gone(servers, "0" * 64)
    # and a correct upload of the same bytes still works
    assert _upload(servers, [blob.UploadBlobsRequest(digest=digest, size=len(data), data=data, finish=True)]) == (
        grpc.StatusCode.OK
    )
    with contextlib.suppress(FileNotFoundError):
        assert not _gone(servers, digest)
