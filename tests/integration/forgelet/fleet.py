"""A fleet of real forgelet processes for tests, and a console whose one fleet is that fleet.

`ForgeletProcess` runs `python -m forgelet.main serve` as a child in its own session and is
stopped (SIGTERM) or killed (SIGKILL) by its PID only. `agent_console(...)` starts the console
with an `agent` fleet (the harness starts the agent executor process) on a port chosen up front,
because the executor starts before the control plane and must know where the registry will be;
the agent reads its executor token (minted by the admin once the console is up) from a file on
each use. Each node is
enrolled as in a deployment: the admin mints a join token for its name (`join_token`), and the
forgelet exchanges it for its node credential at its first registration.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import docker
import yaml
from starforge_api.forgelet.v1 import forgelet_service_pb2 as fl_pb
from starforge_api.forgelet.v1 import forgelet_service_pb2_grpc as fl_grpc
from starforge_api.forgelet.v1 import node_pb2
from starforge_api.forgelet.v1 import node_registry_service_pb2 as reg_pb
from starforge_api.forgelet.v1 import node_registry_service_pb2_grpc as reg_grpc

from common.channel import aio_channel, bearer
from control.config import InventoryConfig
from executor_svc.base import LABEL_ATTEMPT, LABEL_EXECUTOR
from executor_svc.local.executor import executor_id
from tests.integration.backends.docker import TEST_IMAGE, DockerEngine
from tests.integration.console import REPO, Console, console
from tests.ports import free_port

FORGELET_TOKEN = "forgelet-test-token-0123456789"
FLEET = "agent"


@dataclass
class ForgeletProcess:
    """One forgelet node: its config file, state dir, port, and the process serving it."""

    name: str
    root: pathlib.Path
    control_address: str
    join_token: str
    docker_url: str = ""
    runtime: str = "docker"
    gpus: int = 8
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def state_dir(self) -> pathlib.Path:
        return (self.root / "state").resolve()

    @property
    def config_path(self) -> pathlib.Path:
        return self.root / "forgelet.yaml"

    @property
    def log_path(self) -> pathlib.Path:
        return self.root / "forgelet.log"

    def write_config(self, **extra: Any) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        doc: dict[str, Any] = {
            "name": self.name,
            "fleet": FLEET,
            "listen": self.address,
            "control_address": self.control_address,
            "join_token": self.join_token,
            "executor_token": FORGELET_TOKEN,
            "discovery": "config",
            "inventory": [{"series": "h200", "gpus": self.gpus, "real_gpus": False}],
            "cpu_slots": 2,
            "local": {"runtime": self.runtime, "state_dir": str(self.state_dir), "default_stop_grace_seconds": 3},
            **extra,
        }
        if self.docker_url:
            doc["local"]["docker"] = {"base_url": self.docker_url}
        self.config_path.write_text(yaml.safe_dump(doc))

    def start(self, timeout: float = 60.0) -> None:
        if not self.config_path.exists():
            self.write_config()
        ready = self.root / "ready.json"
        ready.unlink(missing_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "forgelet.main",
                    "serve",
                    "--config",
                    str(self.config_path),
                    "--ready-file",
                    str(ready),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=REPO,
                env={k: v for k, v in os.environ.items() if not k.startswith("STARFORGE_")},
            )
        deadline = time.monotonic() + timeout
        while not ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"forgelet {self.name} did not start:\n{self.log_tail()}")
            time.sleep(0.05)
        assert json.loads(ready.read_text())["address"] == self.address

    def kill(self) -> None:
        """SIGKILL, as a crash would: nothing is cleaned up, containers keep running."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def drain(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "forgelet.main", "drain", "--config", str(self.config_path), *args],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
            check=False,
        )

    def containers(self, client: docker.DockerClient, attempt_id: str | None = None) -> list[Any]:
        """This node's containers (all of them, or one attempt's), found by their labels."""
        labels = [f"{LABEL_EXECUTOR}={executor_id(str(self.state_dir))}"]
        if attempt_id:
            labels.append(f"{LABEL_ATTEMPT}={attempt_id}")
        return list(client.containers.list(all=True, filters={"label": labels}, ignore_removed=True))

    async def call(self, method: str, request: Any, token: str | None = FORGELET_TOKEN) -> Any:
        async with aio_channel(self.address) as ch:
            md = bearer(token) if token else ()
            return await getattr(fl_grpc.ForgeletServiceStub(ch), method)(request, metadata=md, timeout=30)

    async def get_node(self) -> node_pb2.Node:
        node: node_pb2.Node = (await self.call("GetNode", fl_pb.GetNodeRequest())).node
        return node


async def join_token(c: Console, node: str, fleet: str = FLEET) -> str:
    """A join token for `node`, minted by the console's admin (`sf admin node join-token`)."""
    stub = reg_grpc.NodeRegistryServiceStub(c.channel)
    r = await stub.CreateJoinToken(reg_pb.CreateJoinTokenRequest(node=node, fleet=fleet), metadata=c.md, timeout=10)
    token: str = r.token
    return token


async def write_executor_token(c: Console, path: pathlib.Path, fleet: str = FLEET) -> None:
    """The agent executor's control-plane credential (`sf admin executor-token`), as a 0600 file."""
    stub = reg_grpc.NodeRegistryServiceStub(c.channel)
    r = await stub.CreateExecutorToken(reg_pb.CreateExecutorTokenRequest(fleet=fleet), metadata=c.md, timeout=10)
    path.touch(mode=0o600)
    path.write_text(r.token + "\n")


async def list_nodes(c: Console, fleet: str = FLEET) -> dict[str, node_pb2.Node]:
    stub = reg_grpc.NodeRegistryServiceStub(c.channel)
    r = await stub.ListNodes(reg_pb.ListNodesRequest(fleet=fleet), metadata=c.md, timeout=10)
    return {n.name: n for n in r.nodes}


async def wait_nodes(
    c: Console, names: Iterable[str], state: int = node_pb2.NODE_STATE_READY, timeout: float = 30
) -> dict[str, node_pb2.Node]:
    wanted = set(names)
    deadline = time.monotonic() + timeout
    while True:
        nodes = await list_nodes(c)
        if all(n in nodes and nodes[n].state == state for n in wanted):
            return nodes
        if time.monotonic() > deadline:
            raise AssertionError(f"nodes {sorted(wanted)} not {node_pb2.NodeState.Name(state)}: {nodes}")
        await asyncio.sleep(0.2)


def agent_section(root: pathlib.Path, control: str, **extra: Any) -> dict[str, Any]:
    return {
        "fleet": FLEET,
        "control_address": control,
        # Written by agent_console once the console is up: an executor token for this fleet.
        "control_token_file": str(root / "agent-token"),
        "forgelet_token": FORGELET_TOKEN,
        "runtime": "docker",
        "state_dir": str(root / "agent"),
        "nodes_refresh_seconds": 0.5,
        **extra,
    }


@contextlib.asynccontextmanager
async def agent_console(
    root: pathlib.Path,
    engine: DockerEngine,
    *,
    nodes: Iterable[str] = ("n1", "n2"),
    agent: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> AsyncIterator[tuple[Console, dict[str, ForgeletProcess]]]:
    """A console with one `agent` fleet of forgelet nodes (8 configured h200 GPUs each)."""
    control = f"127.0.0.1:{free_port()}"
    names = list(nodes)
    inventory = [InventoryConfig(series="h200", nodes=len(names), gpus_per_node=8)]
    async with console(
        root,
        kind="agent",
        local=agent_section(root, control, **(agent or {})),
        inventory=inventory,
        listen=control,
        image_allowlist=["starforge-test-python"],
        default_images={"custom": TEST_IMAGE},
        **overrides,
    ) as c:
        await write_executor_token(c, root / "agent-token")
        fleet = {n: ForgeletProcess(n, root / n, c.address, await join_token(c, n), engine.base_url) for n in names}
        try:
            for f in fleet.values():
                f.start()
            await wait_nodes(c, names)
            yield c, fleet
        finally:
            for f in fleet.values():
                f.stop()
                for container in f.containers(engine.client):
                    with contextlib.suppress(docker.errors.NotFound):
                        container.remove(force=True)
