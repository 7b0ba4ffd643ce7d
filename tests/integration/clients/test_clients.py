"""The API client examples against a real console: list, submit a copy, follow logs, watch states,
decode error details. Each runs as its own process, as a platform team's tool would:
examples/python-client in a fresh virtualenv holding only the API wheel (`starforge_api`,
tools/api_wheel.py) and what it requires (no other StarForge package importable); examples/node-client as the bundle `make examples` builds, under Node.js; examples/go-client built
here from Go code generated from proto/ (buf, protoc-gen-go, protoc-gen-go-grpc) with Debian's Go."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
from starforge_api.job.v1 import job_state_pb2 as st

from tests.integration.console import REPO, Console, console
from tools import api_wheel

EXAMPLE = REPO / "examples" / "python-client" / "starforge_client.py"
NODE_BUNDLE = REPO / "examples" / "node-client" / "dist" / "client.mjs"
CLIENTS = ["python", "node"]
TRAIN = "#!/usr/bin/env bash\nfor i in 1 2 3; do echo line-$i; done\n"


GO_EXAMPLE = REPO / "examples" / "go-client"


@pytest.fixture(scope="module")
def go_client(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The Go example built against freshly generated Go code, offline, in a GOPATH of its own."""
    gopath = tmp_path_factory.mktemp("gopath")
    generate = subprocess.run(
        ["buf", "generate", "--template", str(GO_EXAMPLE / "buf.gen.yaml"), "-o", str(gopath)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert generate.returncode == 0, generate.stderr
    shutil.copytree(GO_EXAMPLE, gopath / "src" / "starforge.dev" / "examples" / "go-client")
    binary = gopath / "bin" / "go-client"
    env = dict(
        os.environ,
        GOPATH=f"{gopath}:/usr/share/gocode",  # Debian's golang-*-dev sources: no download
        GO111MODULE="off",
        GOCACHE=str(gopath / "cache"),
        GOFLAGS="",
    )
    for args in (
        ["build", "starforge.dev/gen/go/..."],
        ["build", "-o", str(binary), "starforge.dev/examples/go-client"],
    ):
        built = subprocess.run(["go", *args], cwd=gopath, env=env, capture_output=True, text=True, check=False)
        assert built.returncode == 0, f"go {' '.join(args)}:\n{built.stderr}"
    return binary


DIST_DEPS = REPO / "build" / "dist-deps"
_PYTHON_CLIENT: list[pathlib.Path] = []


@pytest.fixture(scope="module", autouse=True)
def python_client_venv(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A virtualenv outside the checkout with the API wheel installed offline, as a platform team
    would install the Python client package; its python runs examples/python-client."""
    if not (DIST_DEPS / ".downloaded").is_file():
        pytest.fail("build/dist-deps is missing: run `make dist-deps` (make test does) to install offline")
    root = tmp_path_factory.mktemp("python-client")
    wheel = api_wheel.build(root / "dist")
    venv = root / "venv"
    subprocess.run(
        [getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(venv)], check=True
    )
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
         "--no-compile", "--no-index", "--find-links", str(DIST_DEPS), str(wheel)],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert pip.returncode == 0, pip.stdout + pip.stderr
    python = venv / "bin" / "python"
    leaked = subprocess.run(
        [str(python), "-I", "-c", "import importlib.util as u; print([m for m in ('control', 'common', 'cli', "
         "'starforge') if u.find_spec(m)])"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert leaked.stdout.strip() == "[]", f"StarForge packages beside the API wheel: {leaked.stdout}"
    _PYTHON_CLIENT[:] = [python]
    return python


def client_command(client: str) -> list[str]:
    if client == "node":
        assert NODE_BUNDLE.exists(), f"{NODE_BUNDLE} is missing: run `make examples`"
        return ["node", str(NODE_BUNDLE)]
    return [str(_PYTHON_CLIENT[0]), "-I", str(EXAMPLE)]


async def run_example(
    c: Console, client: str, *args: str, token: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The example as its own process, in a thread: the console serves from this event loop."""
    return await asyncio.to_thread(_run_example, c, client_command(client), *args, token=token)


def _run_example(
    c: Console, command: list[str], *args: str, token: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ["PATH"],
        "STARFORGE_ADDRESS": c.address,
        "STARFORGE_TOKEN": c.token if token is None else token,
    }
    return subprocess.run(
        [*command, *args],
        env=env,
        cwd=EXAMPLE.parent,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("client", CLIENTS)
async def test_list_copy_follow_watch_and_error_details(client: str, tmp_path: pathlib.Path) -> None:
    async with console(tmp_path / "c") as c:
        original = await c.submit_custom(TRAIN)
        await c.wait(original.job_id, st.JOB_STATE_SUCCEEDED)

        listed = await run_example(c, client, "list")
        assert listed.returncode == 0, listed.stderr
        assert original.job_id in listed.stdout and "JOB_STATE_SUCCEEDED" in listed.stdout

        copied = await run_example(c, client, "copy", original.job_id)
        assert copied.returncode == 0, copied.stderr
        copy_id = copied.stdout.strip()
        assert copy_id and copy_id != original.job_id

        watched = await run_example(c, client, "watch", copy_id)
        assert watched.returncode == 0, watched.stderr
        states = watched.stdout.split()
        assert states[-1] == "JOB_STATE_SUCCEEDED", states
        assert "JOB_STATE_RUNNING" in states

        logs = await run_example(c, client, "logs", copy_id)
        assert logs.returncode == 0, logs.stderr
        assert [line for line in logs.stdout.splitlines() if line.startswith("line-")] == ["line-1", "line-2", "line-3"]

        got = await run_example(c, client, "get", copy_id)
        assert json.loads(got.stdout)["spec"]["experiment"] == "exp"

        # Refusals decode from google.rpc details: an unknown job, then an unknown token.
        missing = await run_example(c, client, "get", "no-such-job")
        assert missing.returncode == 1
        error = json.loads(missing.stderr)
        assert error["code"] == "NOT_FOUND"
        info = next(d for d in error["details"] if d["type"] == "google.rpc.ErrorInfo")
        assert info["reason"] == "NOT_FOUND" and info["domain"] == "starforge.dev"

        bad = await run_example(c, client, "list", token="not-a-token")
        assert bad.returncode == 1
        error = json.loads(bad.stderr)
        assert error["code"] == "UNAUTHENTICATED"
        assert any(d.get("reason") == "BAD_TOKEN" for d in error["details"])


async def test_go_client_lists_watches_and_decodes_error_details(
    go_client: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    async with console(tmp_path / "c") as c:
        job = await c.submit_custom(TRAIN)

        watched = await asyncio.to_thread(_run_example, c, [str(go_client)], "watch", job.job_id)
        assert watched.returncode == 0, watched.stderr
        states = watched.stdout.split()
        assert states[-1] == "JOB_STATE_SUCCEEDED" and "JOB_STATE_RUNNING" in states, states

        listed = await asyncio.to_thread(_run_example, c, [str(go_client)], "list")
        assert listed.returncode == 0, listed.stderr
        assert f"{job.job_id}\tJOB_STATE_SUCCEEDED\tcustom/custom" in listed.stdout

        got = await asyncio.to_thread(_run_example, c, [str(go_client)], "get", job.job_id)
        assert json.loads(got.stdout)["jobId"] == job.job_id

        missing = await asyncio.to_thread(_run_example, c, [str(go_client)], "get", "no-such-job")
        assert missing.returncode == 1
        error = json.loads(missing.stderr)
        assert error["code"] == "NOT_FOUND"
        assert {"type": "google.rpc.ErrorInfo", "reason": "NOT_FOUND", "domain": "starforge.dev"}.items() <= next(
            d for d in error["details"] if d["type"] == "google.rpc.ErrorInfo"
        ).items()
