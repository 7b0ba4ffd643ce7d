"""The runner warmed when the executor starts (`local.warm_capsule`, `Runtime.warm`).

Without it, the first attempts on a node each waited seconds for the shared runner venv to be
installed and the pre-forked runner to start (`python -m bench throughput`: ~4 s before the first
job ran). With it, the executor installs both as it starts, from the capsule the console ships,
and the first attempt forks from that zygote. Real processes: the executor, the capsule built by
`capsule.build`, pex's install, the zygote, a job run as a uid of its own (root, as CI runs).
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import shutil
import tempfile
import time

import pytest
import yaml
from starforge_api.job.v1 import job_state_pb2 as st

from common.config import ConfigError
from control import embedded
from executor_svc.capsule_env import inherited_env
from executor_svc.local.config import LocalConfig
from executor_svc.local.pex_warm import SharedPex
from tests.security.isolation_support import finish, isolated_console, state_dir, submit

ECHO = "#!/bin/sh\necho warm\n"


def _log_lines(root: pathlib.Path) -> list[dict[str, str]]:
    lines = []
    for line in (root / "executor.log").read_text().splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            continue
    return lines


async def _until(what: str, check: object, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        await asyncio.sleep(0.1)


async def test_the_first_attempt_forks_from_the_runner_warmed_at_start() -> None:
    capsule = embedded.ensure_capsule()
    async with isolated_console(local={"warm_capsule": str(capsule)}) as c:
        # nothing submitted yet: the executor installs the venv and starts the zygote by itself
        await _until("the executor warmed its runner", lambda: any(
            "warmed the runner" in line["msg"] for line in _log_lines(c.root)
        ))  # fmt: skip
        venvs = list((state_dir(c) / "pex-shared" / "venvs").glob("*/*/*/pex"))
        assert len(venvs) == 1, venvs
        job = await submit(c, ECHO)
        done = await finish(c, job.job_id)
        assert done.state == st.JOB_STATE_SUCCEEDED, await c.logs(job.job_id)
        msgs = [line["msg"] for line in _log_lines(c.root)]
        installs = [i for i, m in enumerate(msgs) if m.startswith("shared runner venv for ") and " ready in " in m]
        zygotes = [i for i, m in enumerate(msgs) if m.startswith("pre-forked runner for ") and " ready (pid " in m]
        launched = [i for i, m in enumerate(msgs) if m.startswith(f"launched {job.job_id}.1 ")]
        # one install and one zygote, both before the launch: the attempt waited for neither
        assert len(installs) == 1 and len(zygotes) == 1 and len(launched) == 1, msgs
        assert installs[0] < launched[0] and zygotes[0] < launched[0], msgs
        # the zygote compiled the shipped capsule's bootstrap program once (the attempt's capsule
        # holds the same program, so its fork ran that code)
        pid = int(msgs[zygotes[0]].rsplit("(pid ", 1)[1].rstrip(")"))
        environ = pathlib.Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert f"FORGE_ZYGOTE_BOOTSTRAP={capsule / 'bootstrap.sh'}".encode() in environ, environ


async def test_a_warm_up_that_fails_leaves_the_install_to_the_first_attempt(tmp_path: pathlib.Path) -> None:
    """A capsule copy whose runner does not match the digest in its name is refused, and that is
    not remembered: an attempt's own (good) copy of the same runner still gets the shared venv."""
    capsule = embedded.ensure_capsule()
    runner = json.loads((capsule / "manifest.json").read_text())["runner"]["path"]
    bad = tmp_path / "bad-capsule"
    shutil.copytree(capsule, bad)
    (bad / runner).write_bytes((bad / runner).read_bytes() + b"tampered")
    state = tmp_path / "state"
    state.mkdir()
    shared = SharedPex(state)
    env = inherited_env()
    assert await shared.warm(bad, env) is None
    attempt = tmp_path / "attempt-capsule"
    attempt.mkdir()
    shutil.copy(capsule / runner, attempt / runner)
    (attempt / "capsule.json").write_text(json.dumps({"runner": runner}))
    got = await shared.env_for(attempt, env, {})
    assert got and pathlib.Path(got["FORGE_PEX_VENV"]).is_relative_to(state / "pex-shared"), got
    # and a warm-up of the good capsule now finds that venv without installing again
    calls: list[object] = []
    shared._install = lambda *a: calls.append(a)  # type: ignore[method-assign]
    assert await shared.warm(capsule, env) == got["FORGE_PEX_VENV"]
    assert calls == []


async def test_a_capsule_without_a_manifest_warms_nothing(tmp_path: pathlib.Path) -> None:
    (tmp_path / "state").mkdir()
    assert await SharedPex(tmp_path / "state").warm(tmp_path, inherited_env()) is None
    assert not (tmp_path / "state" / "pex-shared").exists()


@pytest.mark.parametrize(
    ("section", "says"),
    [
        ({"warm_capsule": "build/capsule", "job_uid_range": [200000, 200063]}, "not an absolute path"),
        ({"warm_capsule": "CAPSULE"}, "only the process runtime with job_uid_range"),
        ({"warm_capsule": "CAPSULE", "runtime": "docker"}, "only the process runtime with job_uid_range"),
        ({"warm_capsule": "/nonexistent", "job_uid_range": [200000, 200063]}, "holds no manifest.json"),
    ],
)
def test_a_warm_capsule_that_would_be_ignored_is_refused(section: dict[str, object], says: str) -> None:
    if section["warm_capsule"] == "CAPSULE":
        section = {**section, "warm_capsule": str(embedded.ensure_capsule())}
    with pytest.raises(ConfigError, match=says):
        LocalConfig(**section)  # type: ignore[arg-type]


def test_sf_up_names_the_capsule_it_ships_for_its_isolated_executor() -> None:
    root = pathlib.Path(tempfile.mkdtemp(prefix="sf-warm-", dir="/tmp"))
    try:
        root.chmod(0o711)
        assert embedded.can_isolate(root)  # root, as CI runs: jobs get uids of their own
        local = yaml.safe_load(embedded.executor_config(root, "process").read_text())["local"]
        assert local["warm_capsule"] == str(embedded.ensure_capsule())
        LocalConfig(runtime="process", job_uid_range=local["job_uid_range"], warm_capsule=local["warm_capsule"])
        (root / "d").mkdir()
        docker = yaml.safe_load(embedded.executor_config(root / "d", "docker").read_text())["local"]
        assert "warm_capsule" not in docker  # nothing to warm there: it would be refused
    finally:
        shutil.rmtree(root, ignore_errors=True)
