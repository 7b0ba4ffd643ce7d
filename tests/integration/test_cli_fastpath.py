"""The real `sf` binary's fast path (`cli.fastpath`) prints, for the hot read commands against a live
console, exactly what the full typer tree (`cli.app`) prints: stdout, stderr and exit code.

The two also use different transports for `sf job ls` and `sf job status`: the fast path's reads go
over `cli.h2unary` (HTTP/2 without grpcio), the full tree's over grpcio; so these tests compare the
transports too, on success and on refusals (NOT_FOUND, UNAUTHENTICATED),
plaintext and TLS (with the right CA and with a CA that did not sign the console's certificate).
So does `sf submit` of an unchanged lab (named by its manifest digest): its unary calls
(GetRecipe, ListProfiles, SubmitJob) go over `cli.h2unary` on the fast path, over grpcio in the
full tree, and both must print the same document and the same refusals."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import re
import subprocess
import sys
import time

from starforge_api.job.v1 import job_state_pb2 as st

from cli.hashcache import AdmittedWorkspaces
from cli.lab import find_lab
from cli.pack import ADMITTED_FILE, pack_lab
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


def _full_tree(c: Console, *args: str, cwd: pathlib.Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """`args` through the typer tree, never the fast path (the same environment as `c.sf`)."""
    probe = "import sys\nfrom cli.app import app\napp(sys.argv[1:])\n"
    return subprocess.run(
        [sys.executable, "-c", probe, *args],
        env=_env(c, **env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
    )


def _fast(c: Console, *args: str, cwd: pathlib.Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """`args` through the real `sf` binary (the fast path for the hot commands)."""
    sf = os.path.join(os.path.dirname(sys.executable), "sf")
    return subprocess.run(
        [sf, *args], env=_env(c, **env), capture_output=True, text=True, timeout=120, check=False, cwd=cwd
    )


async def _compare(c: Console, cases: list[tuple[str, ...]], cwd: pathlib.Path | None = None, **env: str) -> None:
    """Both ways print the same for every case (`env`: extra environment for both)."""
    for args in cases:
        fast, full = await asyncio.gather(
            asyncio.to_thread(_fast, c, *args, cwd=cwd, **env), asyncio.to_thread(_full_tree, c, *args, cwd=cwd, **env)
        )
        assert _seen(fast) == _seen(full), args
        assert "Traceback" not in fast.stderr, args


async def _imports_grpc(c: Console, *args: str, cwd: pathlib.Path | None = None, **env: str) -> bool:
    """Whether the fast path imported grpc for `args` (the h2 calls need none)."""
    r = await asyncio.to_thread(_fast, c, *args, cwd=cwd, PYTHONPROFILEIMPORTTIME="1", **env)
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


# What differs between two submissions of the same lab: the job's id, its times, its place in the queue.
_VOLATILE = re.compile(r'"\d{4}-\d\d-\d\dT[0-9:.]+Z"|\bj[0-9a-z]{10,}\b|#\d+ in queue|"queue(Position|_position)": \d+')


def _submitted(r: subprocess.CompletedProcess[str]) -> tuple[int, str, str]:
    code, out, err = _seen(r)
    return code, _VOLATILE.sub("X", out), _VOLATILE.sub("X", err)


async def _resubmit_both(c: Console, lab: pathlib.Path, *args: str, **env: str) -> None:
    """`sf submit` of the unchanged `lab` both ways: the same output (but for the new job's id and
    times), both named by digest (0 bytes, no files listed), the fast path without grpc."""
    fast = await asyncio.to_thread(_fast, c, *args, cwd=lab, **env)
    full = await asyncio.to_thread(_full_tree, c, *args, cwd=lab, **env)
    assert _submitted(fast) == _submitted(full), (fast.stderr, full.stderr)
    assert "Traceback" not in fast.stderr
    if "json" in args:
        doc = json.loads(fast.stdout)
        assert doc["upload"]["bytes_uploaded"] == 0 and doc["upload"]["files_unchanged"] > 0, doc["upload"]
        assert "files" not in doc["job"]["spec"].get("workspace", {}), "named by its manifest digest"
    assert not await _imports_grpc(c, *args, cwd=lab, **env)


async def test_resubmit_of_an_unchanged_lab_prints_what_the_full_tree_prints(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path) as c:
        lab = await c.lab("exp", files={"src/model.py": "print('model')\n"})
        first = json.loads((await c.sf_async("-o", "json", "submit", "exp", cwd=lab)).stdout)
        assert first["upload"]["files_uploaded"] > 0
        await _resubmit_both(c, lab, "-o", "json", "submit", "exp")
        # a file written again with the same bytes, within the hash cache's racy window (for good:
        # its mtime is a minute ahead), so never cached: hashed again, the lab is the admitted one
        model = lab / "src" / "model.py"
        model.write_text(model.read_text())
        ahead = time.time_ns() + 60 * 10**9
        os.utime(model, ns=(ahead, ahead))
        await _resubmit_both(c, lab, "-o", "json", "submit", "exp")
        await _resubmit_both(c, lab, "submit", "exp", "--label", "a=b", "--priority", "3")
        await _resubmit_both(c, lab, "submit", "exp", "--dry-run", "-o", "json")
        await _resubmit_both(c, lab, "submit", "exp", "--dry-run")
        # refusals: an override the recipe does not know (GetRecipe's answer, checked locally),
        # a profile the registry does not have, SubmitJob's own (a fleet, a secret that does not
        # exist), a token the console does not know, a console that is not there (no connection:
        # grpcio's own message, after its retries)
        refusals = [
            ("submit", "exp", "--set", "no_such_key=1"),
            ("-o", "json", "submit", "exp", "-p", "nosuchgpu:8"),
            ("submit", "exp", "--fleet", "nosuchfleet"),
            ("-o", "json", "submit", "exp", "--secret", "NOPE=nosuchsecret"),
        ]
        await _compare(c, refusals, cwd=lab)
        await _compare(
            c, [("-o", "json", "submit", "exp"), ("submit", "exp")], cwd=lab, STARFORGE_TOKEN="sfp_" + "x" * 40
        )
        gone = {c.address: "127.0.0.1:1"}
        admitted = lab / ".starforge" / "cache" / "admitted.json"
        text = admitted.read_text()
        admitted.write_text(text.replace(*next(iter(gone.items()))))  # the digest known for the absent console
        await _compare(c, [("-o", "json", "submit", "exp")], cwd=lab, STARFORGE_CONSOLE="127.0.0.1:1")


async def test_resubmit_to_a_console_with_another_certificate_is_refused_as_by_the_full_tree(
    tmp_path: pathlib.Path,
) -> None:
    """A re-submit's HTTP/2 TLS refuses a console that the CA does not verify before anything is
    sent, with the full tree's message (a verified re-submit: tests/unit/cli/test_h2unary.py)."""
    pki = make_pki(tmp_path / "pki")
    tls = TlsConfig(cert_file=str(pki.leaf.cert), key_file=str(pki.leaf.key), ca_file=str(pki.ca))
    async with console(tmp_path / "c", tls=tls) as c:
        (c.root / "client.yaml").write_text(json.dumps({"ca_file": str(pki.ca)}))  # for c.sf too
        lab = await c.lab("exp")
        digest = pack_lab(lab, find_lab(lab).settings).manifest.digest
        AdmittedWorkspaces(lab / ADMITTED_FILE).remember(c.address, digest)  # as if it was admitted before
        cases = [("submit", "exp"), ("-o", "json", "submit", "exp")]
        await _compare(c, cases, cwd=lab, STARFORGE_CA_FILE=str(pki.rogue_ca))
        rogue = await asyncio.to_thread(_fast, c, "submit", "exp", cwd=lab, STARFORGE_CA_FILE=str(pki.rogue_ca))
        assert rogue.returncode == 5 and "does not verify" in rogue.stderr, rogue.stderr
