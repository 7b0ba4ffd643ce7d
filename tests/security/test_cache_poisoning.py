"""Nothing a job can write is shared with another job: the executor's blob cache.

Capsule files (bootstrap.sh, the runner, the SDK) and dataset files come from a node-wide,
content-addressed cache. The hostile tenant is the code inside alice's own job: it rewrites every
capsule and dataset file it was given (in place, after a chmod, and by replacing it), hoping
that the next job with the same content runs or reads its version. Its attempt's own capsule.json,
which never enters the cache, is among its targets too: the job must not change it either. Then bob's job, with the same
capsule and his own dataset of the same content, must run unaffected and see the original bytes.
Both for the process runtime (jobs as their own uids) and the docker runtime (real engine).

A cache entry that changed anyway (here: the test, as root on the node, rewrites the entry of
bootstrap.sh) is never run: the executor refuses the launch, naming the file, and evicts the
entry; the next launch fetches a fresh copy.
"""

from __future__ import annotations

import hashlib
import pathlib
from collections.abc import AsyncIterator

import pytest
from starforge_api.job.v1 import job_state_pb2 as st

from tests.integration.backends.docker import TEST_IMAGE, DockerEngine
from tests.integration.console import Console, console
from tests.integration.forgelet.fleet import agent_console
from tests.security.isolation_support import (
    cache_entry,
    capsule_digests,
    finish,
    isolated_console,
    out_dir,
    read_json,
    submit,
    user,
    wait_file,
)

ROWS = b'{"text": "the original row"}\n'
EVIL = b"#!/bin/sh\nenv > /tmp/sf-poisoned-env\necho poisoned\n"

ATTACK_PY = r"""
import json, os, pathlib
EVIL = b"#!/bin/sh\nenv > /tmp/sf-poisoned-env\necho poisoned\n"
cap = pathlib.Path(os.environ["FORGE_CAPSULE_DIR"])
data = pathlib.Path(os.environ["TRAIN_DATA_DIR"])
targets = [cap / "bootstrap.sh", *cap.glob("runner-*.pex"), cap / "sdk" / "starforge" / "__init__.py"]
targets += [cap / "capsule.json"]  # the attempt's own, outside the cache: still not the job's to change
targets += [p for p in data.rglob("*") if p.is_file()]
result = {}

def in_place(t):
    with open(t, "r+b") as f:
        f.write(EVIL)

def chmod_then_write(t):
    os.chmod(t, 0o777)
    in_place(t)

def replace(t):
    tmp = t.with_name(t.name + ".evil")
    tmp.write_bytes(EVIL)
    os.replace(tmp, t)

for t in targets:
    outcomes = []
    for how in (in_place, chmod_then_write, replace):
        try:
            how(t)
            outcomes.append(how.__name__ + ": done")
        except OSError as exc:
            outcomes.append(how.__name__ + ": " + exc.strerror)
    result[str(t.relative_to(cap if t.is_relative_to(cap) else data))] = outcomes
pathlib.Path(os.environ["FORGE_OUT_DIR"], "attack.json").write_text(json.dumps(result))
"""

REPORT_PY = r"""
import hashlib, json, os, pathlib
cap = pathlib.Path(os.environ["FORGE_CAPSULE_DIR"])
data = pathlib.Path(os.environ["TRAIN_DATA_DIR"])
files = {str(p.relative_to(cap)): p for p in [cap / "bootstrap.sh", *cap.glob("runner-*.pex"),
                                              cap / "sdk" / "starforge" / "__init__.py"]}
files.update({"data/" + str(p.relative_to(data)): p for p in data.rglob("*") if p.is_file()})
report = {name: hashlib.sha256(p.read_bytes()).hexdigest() for name, p in files.items()}
report["rows"] = (data / "rows.jsonl").read_text()
pathlib.Path(os.environ["FORGE_OUT_DIR"], "report.json").write_text(json.dumps(report))
"""


async def _dataset(c: Console, tmp: pathlib.Path) -> str:
    """A dataset `rows@v1` of `c`'s user holding ROWS (same content for every user)."""
    data = tmp / f"rows-{c.extra['user']}"
    data.mkdir(parents=True)
    (data / "rows.jsonl").write_bytes(ROWS)
    await c.sf_async("dataset", "push", "rows", str(data), "--version", "v1")
    return f"{c.extra['user']}/rows@v1"


async def _attack_then_victim(admin: Console, image: str, tmp: pathlib.Path, profile: str = "") -> None:
    alice, bob = await user(admin, "alice"), await user(admin, "bob")
    original = capsule_digests(admin)
    rows_digest = hashlib.sha256(ROWS).hexdigest()
    pathlib.Path("/tmp/sf-poisoned-env").unlink(missing_ok=True)

    attacker = await submit(
        alice,
        '#!/bin/sh\nexec python3 "$FORGE_WORKSPACE_DIR/attack.py"\n',
        files={"attack.py": ATTACK_PY},
        image=image,
        dataset=await _dataset(alice, tmp),
        profile=profile,
    )
    done = await finish(alice, attacker.job_id)
    assert done.state == st.JOB_STATE_SUCCEEDED, (done, await alice.logs(attacker.job_id))
    attack = read_json(out_dir(admin, attacker.job_id) / "attack.json")
    assert {"bootstrap.sh", "capsule.json", "rows.jsonl"} <= set(attack), attack
    for target, outcomes in attack.items():
        assert not any(o.endswith(": done") for o in outcomes), f"{target}: {outcomes}"

    # The node's cache still holds the original bytes under every name.
    for name, digest in original.items():
        for executable in (False, True):
            entry = cache_entry(admin, digest, executable)
            if entry.exists():
                assert hashlib.sha256(entry.read_bytes()).hexdigest() == digest, f"cache entry of {name}"
    assert cache_entry(admin, rows_digest).read_bytes() == ROWS

    victim = await submit(
        bob,
        '#!/bin/sh\nexec python3 "$FORGE_WORKSPACE_DIR/report.py"\n',
        files={"report.py": REPORT_PY},
        image=image,
        dataset=await _dataset(bob, tmp),
        profile=profile,
    )
    ended = await finish(bob, victim.job_id)
    assert ended.state == st.JOB_STATE_SUCCEEDED, (ended, await bob.logs(victim.job_id))
    report = read_json(out_dir(admin, victim.job_id) / "report.json")
    assert report.pop("rows") == ROWS.decode()
    assert report == {**original, "data/rows.jsonl": rows_digest}
    assert "poisoned" not in "\n".join(await bob.logs(victim.job_id))
    assert not pathlib.Path("/tmp/sf-poisoned-env").exists()


async def test_process_runtime_jobs_cannot_poison_the_cache(tmp_path: pathlib.Path) -> None:
    async with isolated_console() as admin:
        await _attack_then_victim(admin, "host", tmp_path)


@pytest.fixture
async def docker_console(tmp_path: pathlib.Path, dockerd: DockerEngine, python_image: str) -> AsyncIterator[Console]:
    async with console(
        tmp_path / "console",
        runtime="docker",
        local={"docker": {"base_url": dockerd.base_url}},
        image_allowlist=[python_image.split(":", maxsplit=1)[0]],
    ) as c:
        yield c


@pytest.mark.docker
async def test_docker_runtime_jobs_cannot_poison_the_cache(
    docker_console: Console, python_image: str, tmp_path: pathlib.Path
) -> None:
    await _attack_then_victim(docker_console, python_image, tmp_path)


@pytest.mark.docker
async def test_forgelet_node_jobs_cannot_poison_the_cache(tmp_path: pathlib.Path, dockerd: DockerEngine) -> None:
    """The agent kind: the same attack on a real forgelet node (docker runtime)."""
    async with agent_console(tmp_path / "console", dockerd, nodes=("n1",)) as (c, fleet):
        c.extra["node_state_dir"] = str(fleet["n1"].state_dir)
        await _attack_then_victim(c, TEST_IMAGE, tmp_path, profile="h200:1")


async def test_the_executor_refuses_a_bootstrap_sh_changed_in_its_cache(tmp_path: pathlib.Path) -> None:
    async with isolated_console() as admin:
        first = await submit(admin, "#!/bin/sh\necho first\n")
        assert (await finish(admin, first.job_id)).state == st.JOB_STATE_SUCCEEDED
        boot = capsule_digests(admin)["bootstrap.sh"]
        marker = pathlib.Path(f"/tmp/sf-tampered-bootstrap-ran-{first.job_id}")  # any uid may write it
        for executable in (False, True):  # whichever entry the next launch uses
            entry = cache_entry(admin, boot, executable)
            if entry.exists():
                entry.chmod(0o755)
                entry.write_bytes(f"#!/bin/sh\ntouch {marker}\n".encode())

        refused = await submit(admin, "#!/bin/sh\necho refused\n", experiment="second")
        ended = await finish(admin, refused.job_id)
        assert ended.state == st.JOB_STATE_FAILED, ended
        assert ended.attempts[-1].failure_class == st.FAILURE_CLASS_PRECHECK, ended
        said = ended.attempts[-1].reason + " " + ended.diagnosis.summary
        assert "capsule/bootstrap.sh: the executor's cache entry" in said, ended
        assert not marker.exists()

        again = await submit(admin, '#!/bin/sh\necho again > "$FORGE_OUT_DIR/ran"\n', experiment="third")
        await wait_file(out_dir(admin, again.job_id) / "ran", admin, again.job_id)
        assert (await finish(admin, again.job_id)).state == st.JOB_STATE_SUCCEEDED
        assert not marker.exists()
