"""The real `sf` binary's fast path (`cli.fastpath`) prints, for the hot read commands against a live
console, exactly what the full typer tree (`cli.app`) prints: stdout, stderr and exit code."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import re
import subprocess
import sys

from starforge_api.job.v1 import job_state_pb2 as st

from tests.integration.console import Console, console

# Ages ("12s", "3m", "(5s ago)") may tick between the two runs (and move the columns after them).
_AGE = re.compile(r"\b\d+(s|m|h\d*m?|d)\b")


def _full_tree(c: Console, *args: str) -> subprocess.CompletedProcess[str]:
    """`args` through the typer tree, never the fast path (the same environment as `c.sf`)."""
    env = dict(
        os.environ,
        STARFORGE_CONSOLE=c.address,
        STARFORGE_TOKEN=c.token,
        STARFORGE_CLIENT_CONFIG=str(c.root / "client.yaml"),
    )
    probe = "import sys\nfrom cli.app import app\napp(sys.argv[1:])\n"
    return subprocess.run(
        [sys.executable, "-c", probe, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def _normal(text: str) -> str:
    """Ages replaced, and with them what their width moves: padding and a panel's border runs.
    (The layout itself is compared character for character in tests/unit/cli/test_tables.py.)"""
    text = re.sub(r"─+", "─", re.sub(r" {2,}", "  ", _AGE.sub("AGE", text)))
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
        for args in cases:
            fast, full = await asyncio.gather(c.sf_async(*args, check=False), asyncio.to_thread(_full_tree, c, *args))
            assert _seen(fast) == _seen(full), args
            assert "Traceback" not in fast.stderr, args
