"""`forgelet`: the node agent's command line.

    forgelet serve --config FILE [--listen ADDR] [--ready-file PATH]
    forgelet drain [--config FILE] [--address ADDR] [--grace SECONDS] [--wait SECONDS]

`serve` discovers the GPUs, finds the attempts that kept running (records + container labels),
serves ForgeletService, registers with the control plane and heartbeats until SIGTERM/SIGINT.
Stopping (or killing) forgelet never stops the attempts it runs. Once serving it writes
`{"address", "pid", "name"}` to `<state_dir>/forgelet.json` (and to `--ready-file`), which is how
`forgelet drain` on the same machine finds it.

`drain` empties the node: DrainNode on the control plane (the registry places nothing more here),
then up to `--grace` seconds for the control plane to pause the node's attempts itself, then
ForgeletService.Drain stops whatever still runs; `--wait` then waits for the registry to report
the node DRAINED. Exit code 0 when everything worked, 1 when a step failed, 2 on a bad config.
`--config` defaults to $STARFORGE_FORGELET_CONFIG, else /etc/starforge/forgelet.yaml when it exists.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import socket
import sys
import time
from pathlib import Path

import grpc
from starforge_api.forgelet.v1 import forgelet_service_pb2 as fl_pb
from starforge_api.forgelet.v1 import forgelet_service_pb2_grpc as fl_grpc
from starforge_api.forgelet.v1 import node_pb2
from starforge_api.forgelet.v1 import node_registry_service_pb2 as reg_pb
from starforge_api.forgelet.v1 import node_registry_service_pb2_grpc as reg_grpc

from common import errors
from common.channel import aio_channel, bearer
from common.config import ConfigError
from common.logs import setup_logging
from common.rpc_status import from_rpc_error
from common.server import create_server, serve_until_signal, service
from common.tls import channel_credentials, check_listen, server_credentials
from common.tls import mode as tls_mode
from common.undumpable import make_undumpable
from executor_svc.local.executor import LocalExecutor
from forgelet import config as fcfg
from forgelet.gpus import discover
from forgelet.identity import NodeIdentity
from forgelet.node import Node
from forgelet.registration import Registrar
from forgelet.service import ForgeletServicer, authn_interceptor

log = logging.getLogger("starforge.forgelet")
DEFAULT_CONFIG = Path("/etc/starforge/forgelet.yaml")
RUNTIME_FILE = "forgelet.json"


def _write_json(path: Path, doc: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


def _advertised(cfg: fcfg.ForgeletConfig, listen: str, port: int) -> str:
    if cfg.advertise:
        return cfg.advertise
    host = listen.rsplit(":", 1)[0]
    if host in ("0.0.0.0", "[::]", ""):
        host = socket.gethostname()  # a wildcard is not dialable; set `advertise` to be explicit
    return f"{host}:{port}"


async def serve(cfg: fcfg.ForgeletConfig, listen: str, ready_file: Path | None) -> int:
    """Run forgelet until a signal; returns the exit code."""
    try:
        credentials = server_credentials(cfg.tls)
        control_credentials = channel_credentials(cfg.tls)
        if not NodeIdentity(cfg).bearer():
            raise ConfigError(
                "join_token (or join_token_file): required until this node has a node credential; "
                f"mint one with `sf admin node join-token {cfg.node_name} --fleet {cfg.fleet}`"
            )
    except ConfigError as exc:
        log.error("forgelet: %s", exc)
        return 2
    try:
        inventory = await asyncio.to_thread(discover, cfg.discovery, cfg.node_name, cfg.inventory, cfg.cpu_slots)
        executor = await LocalExecutor.create(cfg.local_config(list(inventory.series)))
    except ConfigError as exc:
        log.error("forgelet: %s", exc)
        return 2
    except errors.StarforgeError as exc:
        log.error("forgelet cannot start: %s", exc.message)
        return 1
    node = Node(cfg.node_name, cfg.fleet, "", inventory, executor)
    servicer = ForgeletServicer(node)
    try:
        server, port, health = await create_server(
            listen,
            [
                service(
                    servicer,
                    fl_grpc.add_ForgeletServiceServicer_to_server,
                    fl_pb.DESCRIPTOR.services_by_name["ForgeletService"],
                )
            ],
            credentials=credentials,
            interceptors=[authn_interceptor(cfg.forgelet_token)],
        )
    except OSError as exc:
        log.error("forgelet cannot serve: %s", exc)
        await executor.close()
        return 1
    await server.start()
    node.address = _advertised(cfg, listen, port)
    doc: dict[str, object] = {"address": node.address, "pid": os.getpid(), "name": node.name}
    _write_json(cfg.state_dir / RUNTIME_FILE, doc)
    if ready_file is not None:
        _write_json(ready_file, doc)
    log.info(
        "forgelet %s serving on %s (%s runtime, %s)", node.name, node.address, executor.runtime.name, tls_mode(cfg.tls)
    )
    registrar = Registrar(
        node,
        cfg.control_address,
        NodeIdentity(cfg),
        call_timeout=cfg.call_timeout_seconds,
        max_backoff=cfg.max_backoff_seconds,
        credentials=control_credentials,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(registrar.run(stop))

    async def on_stop() -> None:
        stop.set()
        await task

    try:
        await serve_until_signal(server, health, grace=cfg.shutdown_grace_seconds, on_stop=on_stop)
    finally:
        stop.set()
        await registrar.close()
        await executor.close()
        if ready_file is not None:
            await asyncio.to_thread(ready_file.unlink, missing_ok=True)
    log.info("forgelet stopped; its attempts keep running")
    return 0


def _local_address(cfg: fcfg.ForgeletConfig, override: str | None) -> str:
    if override:
        return override
    try:
        return str(json.loads((cfg.state_dir / RUNTIME_FILE).read_text())["address"])
    except (OSError, ValueError, KeyError):
        return cfg.advertise or cfg.listen


async def drain(cfg: fcfg.ForgeletConfig, address: str, grace: float, wait: float) -> int:
    """`forgelet drain` (module docstring)."""
    name, ok = cfg.node_name, True
    timeout = cfg.call_timeout_seconds
    token = NodeIdentity(cfg).credential()
    credentials = channel_credentials(cfg.tls)
    local_credentials = credentials if cfg.tls.serving else None
    async with (
        aio_channel(cfg.control_address, credentials) as control,
        aio_channel(address, local_credentials) as local,
    ):
        registry = reg_grpc.NodeRegistryServiceStub(control)
        forgelet = fl_grpc.ForgeletServiceStub(local)
        reg_md = bearer(token) if token else ()
        executor_token = cfg.forgelet_token()
        fl_md = bearer(executor_token) if executor_token else ()
        try:
            r = await registry.DrainNode(reg_pb.DrainNodeRequest(name=name), metadata=reg_md, timeout=timeout)
            print(f"node {name}: {node_pb2.NodeState.Name(r.node.state)} in the registry (no new placements)")
        except grpc.aio.AioRpcError as exc:
            ok = False
            print(f"node {name}: the control plane did not take the drain: {from_rpc_error(exc).message}")
        try:
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline:
                got = await forgelet.GetNode(fl_pb.GetNodeRequest(), metadata=fl_md, timeout=timeout)
                if not got.node.running_attempt_ids:
                    break
                await asyncio.sleep(0.5)
            done = await forgelet.Drain(fl_pb.DrainRequest(), metadata=fl_md, timeout=timeout + 60)
        except grpc.aio.AioRpcError as exc:
            print(f"node {name}: forgelet at {address} did not drain: {from_rpc_error(exc).message}")
            return 1
        stopped = list(done.stopped_attempt_ids)
        print(f"node {name}: stopped {len(stopped)} attempt(s)" + (f": {', '.join(stopped)}" if stopped else ""))
        if wait > 0 and ok:
            ok = await _wait_drained(registry, reg_md, cfg.fleet, name, wait, timeout)
    return 0 if ok else 1


async def undrain(cfg: fcfg.ForgeletConfig) -> int:
    """`forgelet undrain`: the node takes work again (UndrainNode on the control plane)."""
    token = NodeIdentity(cfg).credential()
    async with aio_channel(cfg.control_address, channel_credentials(cfg.tls)) as control:
        registry = reg_grpc.NodeRegistryServiceStub(control)
        try:
            r = await registry.UndrainNode(
                reg_pb.UndrainNodeRequest(name=cfg.node_name),
                metadata=bearer(token) if token else (),
                timeout=cfg.call_timeout_seconds,
            )
        except grpc.aio.AioRpcError as exc:
            print(f"node {cfg.node_name}: the control plane did not take it: {from_rpc_error(exc).message}")
            return 1
    print(f"node {cfg.node_name}: {node_pb2.NodeState.Name(r.node.state)} (takes work again)")
    return 0


async def _wait_drained(
    registry: reg_grpc.NodeRegistryServiceStub,
    md: tuple[tuple[str, str], ...],
    fleet: str,
    name: str,
    wait: float,
    timeout: float,
) -> bool:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            nodes = await registry.ListNodes(reg_pb.ListNodesRequest(fleet=fleet), metadata=md, timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            print(f"node {name}: cannot read the registry: {from_rpc_error(exc).message}")
            return False
        if any(n.name == name and n.state == node_pb2.NODE_STATE_DRAINED for n in nodes.nodes):
            print(f"node {name}: DRAINED")
            return True
        await asyncio.sleep(0.5)
    print(f"node {name}: not DRAINED after {wait:g}s")
    return False


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="forgelet", description="StarForge node agent.")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve ForgeletService and keep the node registered")
    s.add_argument("--config", type=Path)
    s.add_argument("--listen", help="address to serve on (overrides `listen`), e.g. 127.0.0.1:0")
    s.add_argument("--ready-file", type=Path, help='write {"address", "pid", "name"} here once serving')
    d = sub.add_parser("drain", help="stop placing work on this node and stop what runs on it")
    d.add_argument("--config", type=Path)
    d.add_argument("--address", help="this node's forgelet (default: from its state dir, else the config)")
    d.add_argument("--grace", type=float, default=30.0, help="seconds for the control plane to pause attempts")
    d.add_argument("--wait", type=float, default=0.0, help="seconds to wait for the registry to say DRAINED")
    u = sub.add_parser("undrain", help="let a drained node take work again")
    u.add_argument("--config", type=Path)
    return p.parse_args(argv)


def _config_path(given: Path | None) -> Path | None:
    if given is not None:
        return given
    env = os.environ.get("STARFORGE_FORGELET_CONFIG")
    if env:
        return Path(env)
    return DEFAULT_CONFIG if DEFAULT_CONFIG.exists() else None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        cfg = fcfg.load(_config_path(args.config), os.environ)
    except ConfigError as exc:
        print(f"forgelet: {exc}", file=sys.stderr)
        return 2
    if args.command == "serve":
        try:
            check_listen(args.listen or cfg.listen, cfg.tls, "--listen" if args.listen else "listen")
        except ConfigError as exc:
            print(f"forgelet: {exc}", file=sys.stderr)
            return 2
        setup_logging(cfg.log_level)
        make_undumpable()  # it holds run tokens; capsules of the same user must not read its memory
        if args.ready_file is not None:
            args.ready_file.unlink(missing_ok=True)  # never let a caller read a previous run's address
        return asyncio.run(serve(cfg, args.listen or cfg.listen, args.ready_file))
    try:
        if args.command == "undrain":
            return asyncio.run(undrain(cfg))
        return asyncio.run(drain(cfg, _local_address(cfg, args.address), args.grace, args.wait))
    except ConfigError as exc:
        print(f"forgelet: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
