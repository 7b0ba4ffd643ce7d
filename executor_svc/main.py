"""`starforge-executor`: serve one executor kind over gRPC.

    starforge-executor --kind local --config FILE [--listen 127.0.0.1:0] [--ready-file PATH]

The kind comes from `executor_svc.registry`; its configuration from the file (see
`executor_svc.config`). The server has the health service and reflection, requires the `token`
bearer token on every ExecutorService call (checked before the request is read; only an
`insecure: true` service on a loopback address runs without one), and stops gracefully on
SIGTERM/SIGINT. Stopping the executor never stops the attempts it runs.

Once serving, the bound address is written to `--ready-file` as JSON `{"address": ..., "pid": ...}`
(temp file + rename): whoever started this process (the embedded console, tests) waits for that
file instead of guessing a port. Logs are JSON lines on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from starforge_api.executor.v1 import executor_service_pb2 as ex_pb
from starforge_api.executor.v1 import executor_service_pb2_grpc as ex_grpc

from common import errors
from common.config import ConfigError
from common.logs import setup_logging
from common.server import create_server, serve_until_signal, service
from common.tls import check_listen, server_credentials
from common.tls import mode as tls_mode
from common.undumpable import make_undumpable
from executor_svc.config import check_listen_security, load_service_config
from executor_svc.registry import ExecutorKind, UnknownKind, get_kind, valid_kinds
from executor_svc.service import ExecutorServicer, authn_interceptor

log = logging.getLogger("starforge.executor")


def write_ready_file(path: Path, address: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps({"address": address, "pid": os.getpid()}))
    os.replace(tmp, path)


def remove_ready_file(path: Path | None) -> None:
    if path is not None:
        path.unlink(missing_ok=True)


async def serve(kind: ExecutorKind, cfg: Any, listen: str, ready_file: Path | None) -> int:
    """Run the executor service until a signal; returns the process exit code."""
    try:
        credentials = server_credentials(cfg.tls)
    except ConfigError as exc:
        log.error("cannot serve the %s executor: %s", kind.name, exc)
        return 2
    try:
        executor = await kind.create(getattr(cfg, kind.name))
    except errors.StarforgeError as exc:
        log.error("cannot start the %s executor: %s", kind.name, exc.message)
        return 1
    servicer = ExecutorServicer(executor)
    try:
        server, port, health = await create_server(
            listen,
            [
                service(
                    servicer,
                    ex_grpc.add_ExecutorServiceServicer_to_server,
                    ex_pb.DESCRIPTOR.services_by_name["ExecutorService"],
                )
            ],
            credentials=credentials,
            interceptors=[authn_interceptor(cfg.token)],
        )
    except OSError as exc:
        log.error("cannot serve the %s executor: %s", kind.name, exc)
        await executor.close()
        return 1
    await server.start()
    address = f"{listen.rsplit(':', 1)[0]}:{port}"
    if ready_file is not None:
        write_ready_file(ready_file, address)
    log.info(
        "%s executor serving on %s (token %s, %s)",
        kind.name,
        address,
        "required" if cfg.token else "off",
        tls_mode(cfg.tls),
    )
    try:
        await serve_until_signal(server, health, grace=cfg.shutdown_grace_seconds)
    finally:
        await executor.close()
        remove_ready_file(ready_file)
    log.info("%s executor stopped; its attempts keep running", kind.name)
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="starforge-executor", description="Serve one StarForge executor kind.")
    p.add_argument("--kind", required=True, help=f"executor kind: {', '.join(valid_kinds())}")
    p.add_argument("--config", type=Path, help="YAML config file (service keys + a section named after the kind)")
    p.add_argument("--listen", help="address to serve on, e.g. 127.0.0.1:0 (overrides `listen`)")
    p.add_argument("--ready-file", type=Path, help='write {"address", "pid"} here once serving')
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        kind = get_kind(args.kind)
        cfg = load_service_config(kind.name, kind.config_class, args.config, os.environ)
        check_listen(args.listen or cfg.listen, cfg.tls, "--listen" if args.listen else "listen")
        check_listen_security(cfg, args.listen or cfg.listen)
    except (UnknownKind, ConfigError) as exc:
        print(f"starforge-executor: {exc}", file=sys.stderr)
        return 2
    setup_logging(cfg.log_level)
    make_undumpable()  # it holds run tokens; capsules of the same user must not read its memory
    remove_ready_file(args.ready_file)  # never let a caller read a previous run's address
    return asyncio.run(serve(kind, cfg, args.listen or cfg.listen, args.ready_file))


if __name__ == "__main__":
    sys.exit(main())
