"""`python -m common.healthcheck [ADDRESS]`: one grpc.health.v1 Check, for container HEALTHCHECKs.

Every StarForge server (control plane, executor services, forgelet) serves the standard health
service (`common.server.add_services`); this asks it whether `--service` (default "": the whole
server) is SERVING. Exit 0 when it is, 1 when it answers anything else or cannot be reached, 2 on
bad arguments, with one line on stderr saying why. With `--ca-file` the channel is TLS, verified
with that CA (the server's certificate must name `--server-name` or the address's host). The
images' HEALTHCHECKs give no arguments: the defaults come from STARFORGE_HEALTHCHECK_ADDRESS,
STARFORGE_HEALTHCHECK_CA_FILE and STARFORGE_HEALTHCHECK_SERVER_NAME.

    python -m common.healthcheck 127.0.0.1:7070
    python -m common.healthcheck --ca-file /etc/starforge/tls/ca.crt control.internal:7070
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

DEFAULT_TIMEOUT = 3.0
ENV = "STARFORGE_HEALTHCHECK_"


def check(address: str, *, service: str = "", ca_file: str = "", server_name: str = "", timeout: float = 3.0) -> str:
    """The serving status's name ("SERVING", "NOT_SERVING", ...); raises grpc.RpcError when unreachable."""
    options: list[tuple[str, str | int]] = []
    if server_name:
        options.append(("grpc.ssl_target_name_override", server_name))
    if ca_file:
        creds = grpc.ssl_channel_credentials(root_certificates=pathlib.Path(ca_file).read_bytes())
        channel = grpc.secure_channel(address, creds, options=options)
    else:
        channel = grpc.insecure_channel(address, options=options)
    with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        r = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(r.status))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m common.healthcheck", description=__doc__.splitlines()[0])
    env = os.environ
    p.add_argument(
        "address",
        nargs="?",
        default=env.get(ENV + "ADDRESS", ""),
        help=f"host:port of the gRPC server (default ${ENV}ADDRESS)",
    )
    p.add_argument("--service", default="", help='the service to ask about (default "": the whole server)')
    p.add_argument(
        "--ca-file",
        default=env.get(ENV + "CA_FILE", ""),
        help=f"TLS: verify the server with this CA (PEM; default ${ENV}CA_FILE); plaintext without it",
    )
    p.add_argument(
        "--server-name",
        default=env.get(ENV + "SERVER_NAME", ""),
        help=f"TLS: the name the certificate must carry (default ${ENV}SERVER_NAME, else the host)",
    )
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds (default 3)")
    args = p.parse_args(argv)
    if not args.address:
        print(f"healthcheck: give the server's host:port (or set {ENV}ADDRESS)", file=sys.stderr)
        return 2
    if ":" not in args.address or not args.address.rsplit(":", 1)[1].isdigit():
        print(f"healthcheck: {args.address!r} is not host:port", file=sys.stderr)
        return 2
    if args.ca_file and not pathlib.Path(args.ca_file).is_file():
        print(f"healthcheck: --ca-file {args.ca_file} does not exist", file=sys.stderr)
        return 2
    try:
        status = check(
            args.address,
            service=args.service,
            ca_file=args.ca_file,
            server_name=args.server_name,
            timeout=args.timeout,
        )
    except grpc.RpcError as exc:
        code = exc.code().name if isinstance(exc, grpc.Call) else "UNKNOWN"
        detail = exc.details() if isinstance(exc, grpc.Call) else str(exc)
        print(f"healthcheck: {args.address}: {code}: {detail}", file=sys.stderr)
        return 1
    if status != "SERVING":
        print(f"healthcheck: {args.address} {args.service or '(server)'} is {status}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
