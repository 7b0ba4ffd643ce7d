"""A real embedded console for benchmarks: `sf up` (control plane + local executor process) started
as its own process by PID, and the gRPC calls a client makes (upload, submit, watch, drain).

The console runs in another process than the load generator, as in real use, so client and server
never share a GIL.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import grpc
from starforge_api.catalog.v1 import catalog_service_pb2 as cat
from starforge_api.catalog.v1 import catalog_service_pb2_grpc as cat_grpc
from starforge_api.control.v1 import blob_service_pb2 as blob
from starforge_api.control.v1 import blob_service_pb2_grpc as blob_grpc
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.control.v1 import control_service_pb2_grpc as ctl_grpc
from starforge_api.control.v1 import fleet_service_pb2 as fleet
from starforge_api.control.v1 import fleet_service_pb2_grpc as fleet_grpc
from starforge_api.job.v1 import job_pb2, job_spec_pb2, workspace_pb2

from bench.common import CONSOLE_CPUS, REPO, child_pids, log, pinned_command, rss_mib, stop_pid
from common.channel import aio_channel, bearer

SF = pathlib.Path(sys.executable).parent / "sf"
CONSOLE_YAML = """\
image_allowlist: []
default_images:
  custom: host
hf_precheck: false
scheduler_interval_seconds: 0.2
reconcile_interval_seconds: 1.0
"""


@dataclass
class Console:
    """A running `sf up` (by PID) and how to talk to it."""

    proc: subprocess.Popen[bytes]
    state_dir: pathlib.Path
    address: str
    token: str
    user: str
    ui: str = ""  # the web console's URL (envoy), when it serves one
    ingest_address: str = ""  # where runs report (the ingest port, when it has one)

    @property
    def md(self) -> tuple[tuple[str, str], ...]:
        return bearer(self.token)

    def env(self) -> dict[str, str]:
        """Environment for the real `sf` CLI against this console."""
        return dict(
            os.environ,
            STARFORGE_CONSOLE=self.address,
            STARFORGE_TOKEN=self.token,
            STARFORGE_CLIENT_CONFIG=str(self.state_dir / "client.yaml"),
        )

    def pids(self) -> list[int]:
        """The console process and its children (the executor)."""
        return [self.proc.pid, *child_pids(self.proc.pid)]

    def memory(self) -> dict[str, float]:
        control = rss_mib(self.proc.pid)
        return {"control_rss_mib": control["rss"], "control_peak_mib": control["hwm"]}


def start_console(
    state_dir: pathlib.Path, *, database_url: str = "", extra_yaml: str = "", listen: str = "127.0.0.1:0"
) -> Console:
    """`sf up` in the foreground of a child process; returns once it serves. With a fixed `listen`
    port (and web/dist built), the web console is served too, behind envoy, on that port + 10."""
    state_dir.mkdir(parents=True, exist_ok=True)
    text = CONSOLE_YAML + (f"database_url: {database_url}\n" if database_url else "") + extra_yaml
    (state_dir / "console.yaml").write_text(text)
    ready = state_dir / "ready.json"
    ready.unlink(missing_ok=True)
    logf = (state_dir / "console.log").open("ab")
    # The console process `sf up` itself starts (control.embedded), in the foreground of a child.
    cmd = [
        sys.executable,
        "-m",
        "control.embedded",
        "--state-dir",
        str(state_dir),
        "--listen",
        listen,
        "--ready-file",
        str(ready),
    ]
    cmd = pinned_command(cmd, CONSOLE_CPUS)  # STARFORGE_BENCH_CONSOLE_CPUS, the executor included
    proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True, cwd=REPO)
    deadline = time.monotonic() + 120
    while True:
        with contextlib.suppress(OSError, ValueError):
            info = json.loads(ready.read_text())
            break
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_pid(proc)
            tail = (state_dir / "console.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the console did not start:\n{tail}")
        time.sleep(0.05)
    token = pathlib.Path(info["token_file"]).read_text().strip()
    where = f", CPUs {CONSOLE_CPUS}" if CONSOLE_CPUS else ""
    log(f"console pid {proc.pid} at {info['address']} ({database_url or 'sqlite'}{where})")
    return Console(
        proc, state_dir, info["address"], token, info["user"], info.get("ui") or "",
        info.get("ingest_address") or info["address"],
    )  # fmt: skip


@contextlib.contextmanager
def running_console(state_dir: pathlib.Path, **kw: Any) -> Iterator[Console]:
    c = start_console(state_dir, **kw)
    try:
        yield c
    finally:
        children = c.pids()[1:]
        stop_pid(c.proc, 30)
        # `sf up` stops its executor by PID; if it had to be killed, stop that child ourselves
        # (only a process whose command line names this state dir: a PID may have been reused).
        for pid in children:
            with contextlib.suppress(OSError):
                if str(state_dir) in pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                    os.kill(pid, signal.SIGTERM)


class Client:
    """The calls benchmarks make, over one channel."""

    def __init__(self, console: Console, channel: grpc.aio.Channel | None = None) -> None:
        self.console = console
        self.channel = channel or aio_channel(console.address)
        self.md = console.md
        self.control = ctl_grpc.ControlServiceStub(self.channel)
        self.blobs = blob_grpc.BlobServiceStub(self.channel)
        self.catalog = cat_grpc.CatalogServiceStub(self.channel)
        self.fleets = fleet_grpc.FleetServiceStub(self.channel)

    async def close(self) -> None:
        await self.channel.close(None)

    async def upload(self, files: Mapping[str, bytes], executable: set[str]) -> workspace_pb2.WorkspaceManifest:
        manifest = workspace_pb2.WorkspaceManifest()
        for path in sorted(files):
            data = files[path]
            digest = hashlib.sha256(data).hexdigest()
            manifest.files.add(path=path, sha256=digest, size=len(data), executable=path in executable)

        async def chunks() -> AsyncIterator[blob.UploadBlobsRequest]:
            for f in manifest.files:
                yield blob.UploadBlobsRequest(digest=f.sha256, size=f.size, data=files[f.path], finish=True)

        await self.blobs.UploadBlobs(chunks(), metadata=self.md)
        return manifest

    async def custom_spec(self, train_sh: str, experiment: str = "exp") -> job_spec_pb2.JobSpec:
        """The JobSpec `sf submit` builds for a custom/custom experiment whose train.sh is `train_sh`
        (its workspace uploaded first)."""
        entry = f"experiments/{experiment}/train.sh"
        manifest = await self.upload({entry: train_sh.encode()}, {entry})
        lock = (await self.catalog.ResolveLock(cat.ResolveLockRequest(method="custom/custom"), metadata=self.md)).lock
        return job_spec_pb2.JobSpec(
            api_version="forge/v2",
            project=f"@{self.console.user}/lab",
            experiment=experiment,
            method="custom/custom",
            recipe_lock=lock,
            config_json=json.dumps({"image": "host", "observability": "platform"}),
            workspace=manifest,
        )

    async def submit(self, spec: job_spec_pb2.JobSpec, request_id: str = "") -> job_pb2.Job:
        r = await self.control.SubmitJob(ctl.SubmitJobRequest(spec=spec, request_id=request_id), metadata=self.md)
        job: job_pb2.Job = r.job
        return job

    async def wait_state(self, job_id: str, states: set[int], timeout: float = 120.0) -> job_pb2.Job:
        """Follow WatchJob until the job is in one of `states` (or past them, for RUNNING)."""
        async with asyncio.timeout(timeout):
            async for r in self.control.WatchJob(ctl.WatchJobRequest(job_id=job_id), metadata=self.md):
                if r.job.state in states:
                    found: job_pb2.Job = r.job
                    return found
        return await self.get(job_id)

    async def get(self, job_id: str) -> job_pb2.Job:
        job: job_pb2.Job = (await self.control.GetJob(ctl.GetJobRequest(job_id=job_id), metadata=self.md)).job
        return job

    async def drain(self, name: str = "local") -> None:
        await self.fleets.DrainFleet(fleet.DrainFleetRequest(fleet=name, reason="benchmark"), metadata=self.md)
