"""Laying out a real capsule + workspace in a temp dir and running `sh bootstrap.sh` against it."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import pathlib
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from capsule.layout import (
    PoolInfo,
    RunInfo,
    capsule_files_from_manifest,
    capsule_json,
    describe_tree,
    install_capsule,
    runner_from_manifest,
)

TOKEN = "run-token-123"
TOKEN_FILE = ".forge-ingest-token"
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass
class Launch:
    capsule_dir: pathlib.Path
    workspace_dir: pathlib.Path
    scratch_dir: pathlib.Path
    out_dir: pathlib.Path
    env: dict[str, str]
    attempt_id: str


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str
    pid: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def lay_out(
    root: pathlib.Path,
    manifest: Mapping[str, Any],
    workspace: Mapping[str, str | bytes],
    *,
    ingest_addr: str,
    attempt_id: str = "jtest0000000001.1",
    entrypoint: str = "experiments/demo/train.sh",
    adapter: str = "custom",
    config: Mapping[str, Any] | None = None,
    observability: str = "platform",
    env: Mapping[str, str] | None = None,
) -> Launch:
    ws = root / "workspace"
    for rel, content in workspace.items():
        path = ws / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
        if rel.endswith(".sh"):
            path.chmod(0o755)
    ws.mkdir(parents=True, exist_ok=True)
    job_id = attempt_id.rsplit(".", 1)[0]
    data = capsule_json(
        job_id=job_id,
        attempt_id=attempt_id,
        attempt_number=int(attempt_id.rsplit(".", 1)[1]),
        runner=runner_from_manifest(manifest),
        capsule_files=capsule_files_from_manifest(manifest),
        workspace_files=describe_tree(ws),
        run=RunInfo(
            method="custom/custom",
            adapter=adapter,
            experiment="demo",
            entrypoint=entrypoint,
            config=dict(config or {"lr": 0.001}),
            observability=observability,
            pools=[PoolInfo(name="main", series="cpu", nodes=1, gpus_per_node=0)],
        ),
    )
    capsule_dir = root / "capsule"
    install_capsule(manifest, data, capsule_dir)
    scratch = root / "scratch"
    out = root / "out"
    scratch.mkdir()
    out.mkdir()
    full_env = {
        "PATH": SYSTEM_PATH,
        "HOME": str(root),
        "LANG": "C.UTF-8",
        "FORGE_CAPSULE_DIR": str(capsule_dir),
        "FORGE_CAPSULE_SHA256": hashlib.sha256(data).hexdigest(),
        "FORGE_WORKSPACE_DIR": str(ws),
        "FORGE_OUT_DIR": str(out),
        "FORGE_SCRATCH_DIR": str(scratch),
        "FORGE_INGEST_ADDR": ingest_addr,
        "FORGE_INGEST_TOKEN_FILE": str(scratch / TOKEN_FILE),
        "FORGE_JOB_ID": job_id,
        "FORGE_ATTEMPT_ID": attempt_id,
        "FORGE_ATTEMPT_NUMBER": attempt_id.rsplit(".", 1)[1],
        "FORGE_INGEST_DRAIN_SECONDS": "20",
        "FORGE_STOP_GRACE_SECONDS": "5",
    }
    full_env.update(env or {})
    return Launch(capsule_dir, ws, scratch, out, full_env, attempt_id)


class Bootstrap:
    """`sh bootstrap.sh` as a child process in its own session, killed by PID on timeout."""

    def __init__(self, launch: Launch) -> None:
        self.launch = launch
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        # as the executors do (executor_svc/capsule_env.py): the runner reads and deletes it
        token_file = self.launch.scratch_dir / TOKEN_FILE
        token_file.write_text(TOKEN)
        token_file.chmod(0o600)
        self.proc = await asyncio.create_subprocess_exec(
            "sh",
            str(self.launch.capsule_dir / "bootstrap.sh"),
            env=self.launch.env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    async def result(self, timeout: float) -> Result:
        assert self.proc is not None
        try:
            stdout, stderr = await asyncio.wait_for(self.proc.communicate(), timeout)
        except TimeoutError:
            self.kill()
            stdout, stderr = await self.proc.communicate()
            raise AssertionError(
                f"bootstrap did not finish in {timeout} s\nstdout:\n{stdout.decode()[-3000:]}\n"
                f"stderr:\n{stderr.decode()[-3000:]}"
            ) from None
        assert self.proc.returncode is not None
        return Result(
            self.proc.returncode, stdout.decode(errors="replace"), stderr.decode(errors="replace"), self.proc.pid
        )

    def kill(self) -> None:
        """Kill, by PID, the runner and every process below it (the training command runs in its
        own session, so killing the runner's group alone could leave it behind)."""
        if self.proc is None or self.proc.returncode is not None:
            return  # reaped: its PID may belong to someone else by now
        for pid in [*_descendants(self.proc.pid), self.proc.pid]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


async def run_capsule(launch: Launch, timeout: float = 60.0) -> Result:
    boot = Bootstrap(launch)
    await boot.start()
    try:
        return await boot.result(timeout)
    finally:
        boot.kill()
