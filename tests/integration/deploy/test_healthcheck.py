"""`python -m common.healthcheck`, the images' HEALTHCHECK, against a real gRPC server: exit 0 while
it serves, 1 once it reports NOT_SERVING or is gone, 2 on bad arguments; TLS with a CA file."""

from __future__ import annotations

import asyncio
import os
import pathlib
import subprocess
import sys

import grpc
from grpc_health.v1 import health_pb2

from common.server import create_server
from tests.security.tls_support import make_pki


def healthcheck(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "common.healthcheck", *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


async def test_exit_codes_follow_the_health_service() -> None:
    server, port, health = await create_server("127.0.0.1:0", [])
    await server.start()
    address = f"127.0.0.1:{port}"
    try:
        ok = await asyncio.to_thread(healthcheck, address)
        assert (ok.returncode, ok.stderr) == (0, "")
        # the address may come from the environment, as in the images
        from_env = await asyncio.to_thread(healthcheck, env={"STARFORGE_HEALTHCHECK_ADDRESS": address})
        assert from_env.returncode == 0, from_env.stderr
        await health.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        down = await asyncio.to_thread(healthcheck, address)
        assert down.returncode == 1
        assert "NOT_SERVING" in down.stderr
        unknown = await asyncio.to_thread(healthcheck, address, "--service", "no.such.Service")
        assert unknown.returncode == 1 and "NOT_FOUND" in unknown.stderr, unknown.stderr
    finally:
        await server.stop(0)
    gone = await asyncio.to_thread(healthcheck, address, "--timeout", "2")
    assert gone.returncode == 1 and "UNAVAILABLE" in gone.stderr, gone.stderr
    for bad in (("nonsense",), ("127.0.0.1:x",), ("127.0.0.1:1", "--ca-file", "/nonexistent/ca.crt")):
        r = await asyncio.to_thread(healthcheck, *bad, env={"STARFORGE_HEALTHCHECK_ADDRESS": ""})
        assert r.returncode == 2, (bad, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    missing = await asyncio.to_thread(healthcheck, env={"STARFORGE_HEALTHCHECK_ADDRESS": ""})
    assert missing.returncode == 2 and "STARFORGE_HEALTHCHECK_ADDRESS" in missing.stderr


async def test_tls_is_verified_with_the_ca_file(tmp_path: pathlib.Path) -> None:
    pki = make_pki(tmp_path)
    creds = grpc.ssl_server_credentials([(pki.leaf.key.read_bytes(), pki.leaf.cert.read_bytes())])
    server, port, _ = await create_server("127.0.0.1:0", [], credentials=creds)
    await server.start()
    address = f"127.0.0.1:{port}"
    try:
        ok = await asyncio.to_thread(healthcheck, address, "--ca-file", str(pki.ca))
        assert ok.returncode == 0, ok.stderr
        rogue = await asyncio.to_thread(healthcheck, address, "--ca-file", str(pki.rogue_ca), "--timeout", "2")
        assert rogue.returncode == 1, rogue.stderr
        plaintext = await asyncio.to_thread(healthcheck, address, "--timeout", "2")
        assert plaintext.returncode == 1, plaintext.stderr
    finally:
        await server.stop(0)
