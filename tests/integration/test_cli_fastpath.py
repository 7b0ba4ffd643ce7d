"""The real `sf` binary's fast path (`cli.fastpath`) prints, for the hot read commands against a live
console, exactly what the full typer tree (`cli.app`) prints: stdout, stderr and exit code.

The two also use different transports for `sf job ls` and `sf job status`: the fast path's reads go
over `cli.h2unary` (HTTP/2 without grpcio), the full tree's over grpcio; so these tests compare the
transports too, on success and on refusals (NOT_FOUND, UNAUTHENTICATED),
plaintext and TLS (with the right CA and with a CA that did not sign the console's certificate)."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import re
import subprocess
import sys

from starforge_api.job.v1 import job_state_pb2 as st

from common.tls import TlsConfig
from tests.integration.console import Console, console
from tests.security.tls_support import make_pki

# Ages ("12s", "3m", "(5s ago)") may tick between the two runs (and move the columns after them).
_AGE = re.compile(r"\b\d+(s|m|h\d*m?|d)\b")


def _env(c: Console, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "STARFORGE_CONSOLE": c.address,
        "STARFORGE_TOKEN": c.token,
        "STARFORGE_CLIENT_CONFIG": str(c.root / "client.yaml"),
        **extra,
    }


def _full_tree(c: Console, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`args` through the typer tree, never the fast path (the same environment as `c.sf`)."""
    probe = "import sys\nfrom cli.app import app\napp(sys.argv[1:])\n"
    return subprocess.run(
        [sys.executable, "-c", probe, *args],
        env=_env(c, **env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _fast(c: Console, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`args` through the real `sf` binary (the fast path for the hot commands)."""
    sf = os.path.join(os.path.dirname(sys.executable), "sf")
    return subprocess.run([sf, *args], env=_env(c, **env), capture_output=True, text=True, timeout=120, check=False)


async def _compare(c: Console, cases: list[tuple[str, ...]], **env: str) -> None:
    """Both ways print the same for every case (`env`: extra environment for both)."""
    for args in cases:
        fast, full = await asyncio.gather(
            asyncio.to_thread(_fast, c, *args, **env), asyncio.to_thread(_full_tree, c, *args, **env)
        )
        assert _seen(fast) == _seen(full), args
        assert "Traceback" not in fast.stderr, args


async def _imports_grpc(c: Console, *args: str, **env: str) -> bool:
    """Whether the fast path imported grpc for `args` (the h2 reads need none)."""
    r = await asyncio.to_thread(_fast, c, *args, PYTHONPROFILEIMPORTTIME="1", **env)
    assert r.returncode == 0, r.stderr[-2000:]
    return any(line.split("|")[-1].strip() == "grpc" for line in r.stderr.splitlines())


# grpc core's own log lines (a failed TLS handshake): their time, thread id and count differ run to run
_GRPC_LOG = re.compile(r"^[IWE]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\] .*\n?", re.MULTILINE)


def _normal(text: str) -> str:
    """Ages replaced, and with them what their width moves: padding and a panel's border runs.
    (The layout itself is compared character for character in tests/unit/cli/test_tables.py.)"""
    text = re.sub(r"─+", "─", re.sub(r" {2,}", "  ", _AGE.sub("AGE", _GRPC_LOG.sub("", text))))
    return "\n".join(line.rstrip() for line in text.split("\n"))


def _seen(r: subprocess.CompletedProcess[str]) -> tuple[int, str, str]:
    return r.returncode, _normal(r.stdout), _normal(r.stderr)


async def test_hot_commands_print_what_the_full_tree_prints(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path) as c:
        lab = await c.lab("exp", "#!/usr/bin/env bash\necho one line\n")
        done = json.loads((await c.sf_async("-o", "json", "submit", "exp", cwd=lab)).stdout)["job"]["job_id"]
        await c.wait(done, st.JOB_STATE_SUCCEEDED)
        cases = [
            ("job", "ls"),
            ("-o", "json", "job", "ls"),
            ("job", "ls", "--state", "succeeded", "-n", "1"),
            ("job", "ls", "--state", "bogus"),
            ("job", "status", done),
            ("job", "status"),
            ("job", "status", done, "-o", "json"),
            ("job", "status", "j0nosuchjob"),
            ("-o", "json", "job", "status", "j0nosuchjob"),
            ("job", "logs", done, "--no-follow"),
            ("job", "logs", done),
            ("--console", "127.0.0.1:1", "job", "ls"),
            ("--version",),
        ]
        await _compare(c, cases)
        assert not await _imports_grpc(c, "job", "ls") and not await _imports_grpc(c, "job", "status", done)
        # a token the console does not know (PERMISSION_DENIED with details: tests/unit/cli/test_h2unary.py)
        refused = [("job", "ls"), ("job", "status", done), ("-o", "json", "job", "status", done)]
        await _compare(c, refused, STARFORGE_TOKEN="sfp_" + "x" * 40)


async def test_hot_commands_over_tls_print_what_the_full_tree_prints(tmp_path: pathlib.Path) -> None:
    pki = make_pki(tmp_path / "pki")
    tls = TlsConfig(cert_file=str(pki.leaf.cert), key_file=str(pki.leaf.key), ca_file=str(pki.ca))
    async with console(tmp_path / "c", tls=tls) as c:
        cases = [("job", "ls"), ("job", "status"), ("job", "status", "j0nosuchjob"), ("-o", "json", "job", "ls")]
        await _compare(c, cases, STARFORGE_CA_FILE=str(pki.ca))
        assert not await _imports_grpc(c, "job", "ls", STARFORGE_CA_FILE=str(pki.ca))  # h2 did the TLS
        await _compare(c, cases, STARFORGE_CA_FILE=str(pki.ca), STARFORGE_TOKEN="sfp_" + "x" * 40)
        # a CA that did not sign the console's certificate: refused before anything is sent
        await _compare(c, cases, STARFORGE_CA_FILE=str(pki.rogue_ca))
        rogue = await asyncio.to_thread(_fast, c, "job", "ls", STARFORGE_CA_FILE=str(pki.rogue_ca))
        assert rogue.returncode == 5 and "does not verify" in rogue.stderr, rogue.stderr
