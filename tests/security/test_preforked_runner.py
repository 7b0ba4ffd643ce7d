"""The pre-forked runner (executor_svc/local/zygote.py, capsule/runner/zygote.py) shares nothing of
one tenant with the next.

With job uids, every attempt's runner is forked from one warm process per runner venv, which runs
as root. The hostile tenant is bob's job: its runner is a copy of that process, so whatever the
zygote ever held of alice's job (her environment, her job's id) would be in bob's runner too.
The test reads the zygote's whole writable memory, as root, after alice's job started, and finds
nothing of hers there (and does find what it must hold: the spec directory's path). While
alice's job runs, the zygote holds an open descriptor of her attempt's directory (to write her
exit code); bob's runner, forked meanwhile, holds none of it. Bob's job also tries what it can
reach: the spec files (in a directory only root enters), its own runner's memory and environment
(not dumpable), its own exit code (written by the zygote, root, in a directory of root's), and
the zygote (root: no signal, no memory).
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import re
import secrets
import shutil
import sys
import tempfile
import time

from starforge_api.job.v1 import job_state_pb2 as st

from tests.security.isolation_support import (
    PROC_READERS,
    attempt_dir,
    finish,
    isolated_console,
    out_dir,
    read_json,
    state_dir,
    submit,
    user,
    wait_file,
)

PROBE = r"""#!/bin/sh
set -u
python3 - "$FORGE_OUT_DIR/probe.json" "$PPID" "{specs}" <<'PY'
import json, os, signal, sys
out, runner, specs = sys.argv[1], int(sys.argv[2]), sys.argv[3]
{proc_readers}
def attempt(fn):
    try:
        fn()
        return "done"
    except OSError as exc:
        return exc.strerror

def read(path):
    with open(path, "rb") as f:
        f.read(1)

zygote = parent(runner)
attempt_dir = os.path.dirname(os.environ["FORGE_CAPSULE_DIR"])
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
result = {
    "uid": os.getuid(),
    "groups": os.getgroups(),
    "no_new_privs": status["NoNewPrivs"].strip(),
    "runner": runner,
    "runner_cmdline": cmdline(runner),
    "zygote": zygote,
    "zygote_cmdline": cmdline(zygote),
    "list specs": attempt(lambda: os.listdir(specs)),
    # where the executor makes the spec's inode (unnamed) before it links it into the spec directory
    "list attempt dir": attempt(lambda: os.listdir(attempt_dir)),
    # the exit code the zygote writes when the runner ends: the job would say "0" whatever happened
    "write exit code": attempt(lambda: open(os.path.join(attempt_dir, "exit_code"), "w").write("0\n")),
    "write exit code temp": attempt(lambda: open(os.path.join(attempt_dir, "exit_code.tmp"), "w").write("0\n")),
    "read runner environ": attempt(lambda: read(f"/proc/{runner}/environ")),
    "read runner memory": attempt(lambda: read(f"/proc/{runner}/mem")),
    "read zygote memory": attempt(lambda: read(f"/proc/{zygote}/mem")),
    # the zygote holds a descriptor of every running attempt's directory: reopening one through
    # /proc would reach another tenant's attempt
    "list zygote descriptors": attempt(lambda: os.listdir(f"/proc/{zygote}/fd")),
    "open zygote descriptor": attempt(lambda: os.open(f"/proc/{zygote}/fd/3", os.O_RDONLY)),
    "signal zygote": attempt(lambda: os.kill(zygote, signal.SIGSTOP)),
    "kill zygote": attempt(lambda: os.kill(zygote, signal.SIGKILL)),
}
json.dump(result, open(out, "w"))
PY
"""


def _writable_memory(pid: int) -> bytes:
    """Every private writable mapping of `pid` (its heap, stacks, data), read as root."""
    chunks = []
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for line in maps:
            fields = line.split()
            if not fields[1].startswith("rw"):
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            try:
                mem.seek(start)
                chunks.append(mem.read(end - start))
            except OSError:  # [vvar] and the like
                continue
    return b"".join(chunks)


async def test_a_runner_forked_for_bob_holds_nothing_of_alices_job() -> None:
    async with isolated_console() as c:
        alice, bob = await user(c, "alice"), await user(c, "bob")
        specs = state_dir(c) / "zygote"
        marker = f"alice-secret-{secrets.token_hex(12)}"
        probe = PROBE.replace("{specs}", str(specs)).replace("{proc_readers}", PROC_READERS)
        victim = await alice.submit_custom(probe, env={"ALICE_MARKER": marker})
        done = await finish(alice, victim.job_id)
        assert done.state == st.JOB_STATE_SUCCEEDED, await alice.logs(victim.job_id)
        attack = await submit(bob, probe)
        done = await finish(bob, attack.job_id)
        assert done.state == st.JOB_STATE_SUCCEEDED, await bob.logs(attack.job_id)

        seen = [read_json(out_dir(c, job.job_id) / "probe.json") for job in (victim, attack)]
        venvs = state_dir(c) / "pex-shared" / "venvs"
        for report in seen:
            # each job's runner was forked (its parent: the zygote) ...
            assert report["runner_cmdline"] == report["zygote_cmdline"], report
            python, flag, entry = report["zygote_cmdline"]
            assert flag == "-I" and pathlib.Path(entry).is_relative_to(venvs), report
            assert python == str(pathlib.Path(entry).parent / "bin" / "python"), report
            # ... and dropped to the job's own uid, without groups, for good
            assert report["uid"] not in (0, os.getuid()) and report["groups"] == [], report
            assert report["no_new_privs"] == "1", report
            denied = (
                "list specs",
                "list attempt dir",
                "read runner environ",
                "read runner memory",
                "read zygote memory",
                "list zygote descriptors",
                "open zygote descriptor",
                "write exit code",
                "write exit code temp",
            )
            for what in denied:
                assert report[what] == "Permission denied", (what, report)
            for what in ("signal zygote", "kill zygote"):
                assert report[what] == "Operation not permitted", (what, report)
        assert seen[0]["zygote"] == seen[1]["zygote"], seen  # one zygote for both tenants
        zygote = seen[0]["zygote"]
        assert pathlib.Path(f"/proc/{zygote}").stat().st_uid == 0
        os.kill(zygote, 0)  # still there: bob's SIGSTOP was refused, the test's signal 0 is not

        memory = _writable_memory(zygote)
        assert str(specs).encode() in memory  # the scan does see the zygote's own strings
        for secret in (marker, victim.job_id):
            assert secret.encode() not in memory, f"the zygote's memory holds {secret!r}"
        # the specs were taken and deleted by the wrappers; only root may enter their directory
        assert list(specs.iterdir()) == []
        assert specs.stat().st_uid == 0 and specs.stat().st_mode & 0o777 == 0o700
        status = pathlib.Path(f"/proc/{zygote}/status").read_text()
        assert re.search(r"^State:\s+S", status, re.M), status  # sleeping on its input, not stopped


# Writes the runner's pid (train.sh's parent) and waits for `release`.
HOLDING = """#!/bin/sh
echo "$PPID" > "$FORGE_OUT_DIR/runner"
while [ ! -e "$FORGE_OUT_DIR/release" ]; do sleep 0.1; done
"""


def _open_folders(pid: int) -> set[str]:
    """What `pid`'s open descriptors name, read as root."""
    names = set()
    for fd in pathlib.Path(f"/proc/{pid}/fd").iterdir():
        try:
            names.add(os.readlink(fd))
        except OSError:  # closed meanwhile
            continue
    return names


def _parent(pid: int) -> int:
    raw = pathlib.Path(f"/proc/{pid}/stat").read_bytes()
    return int(raw[raw.rfind(b")") + 2 :].split()[1])


async def test_the_zygote_holds_a_running_attempts_directory_and_no_runner_inherits_it() -> None:
    async with isolated_console() as c:
        alice, bob = await user(c, "alice"), await user(c, "bob")
        first = await alice.submit_custom(HOLDING)
        await wait_file(out_dir(c, first.job_id) / "runner", alice, first.job_id)
        second = await submit(bob, HOLDING)  # forked while alice's attempt runs
        await wait_file(out_dir(c, second.job_id) / "runner", bob, second.job_id)
        runners = [int((out_dir(c, j.job_id) / "runner").read_text()) for j in (first, second)]
        zygote = _parent(runners[0])
        assert _parent(runners[1]) == zygote
        folders = [str(attempt_dir(c, j.job_id)) for j in (first, second)]
        # the zygote holds both directories (to write each exit code) ...
        assert set(folders) <= _open_folders(zygote), _open_folders(zygote)
        # ... and no runner holds anything of the other attempt, nor the descriptor of its own
        # directory (it closed every inherited one; its log is in there, opened by itself)
        for runner, own, other in zip(runners, folders, reversed(folders), strict=True):
            held = _open_folders(runner)
            assert own not in held and not any(n == other or n.startswith(f"{other}/") for n in held), held
        for job in (first, second):
            (out_dir(c, job.job_id) / "release").touch()
        for tenant, job in ((alice, first), (bob, second)):
            done = await finish(tenant, job.job_id)
            assert done.state == st.JOB_STATE_SUCCEEDED, await tenant.logs(job.job_id)
        # once each runner has exited (after it reported its end): its exit code written and its
        # directory let go, nothing of either attempt is left in the zygote
        attempts = str(state_dir(c) / "attempts")
        deadline = time.monotonic() + 30
        while any(name.startswith(attempts) for name in _open_folders(zygote)):
            assert time.monotonic() < deadline, _open_folders(zygote)
            await asyncio.sleep(0.05)
        for folder in folders:
            assert (pathlib.Path(folder) / "exit_code").read_text() == "0\n"


async def test_a_jobs_own_variables_cannot_point_the_pre_forked_runner_at_its_code() -> None:
    """Bob names a venv of his own (world-writable, its `pex` writes a marker) in the variables
    the executor uses to pick and start a runner: FORGE_PEX_VENV, PEX_MODULE, FORGE_ZYGOTE_SPECS.
    His runner must still be the shared venv's, and his code must never run."""
    evil = pathlib.Path(tempfile.mkdtemp(prefix="sf-evil-venv-", dir="/tmp"))
    marker = evil / "ran"
    try:
        evil.chmod(0o777)
        (evil / "bin").mkdir()
        (evil / "bin" / "python").symlink_to(sys.executable)
        (evil / "pex").write_text(f"open({str(marker)!r}, 'w').write(str(__import__('os').getuid()))\n")
        probe = (
            "#!/bin/sh\n"
            'python3 - "$FORGE_OUT_DIR/runner" "$PPID" <<\'PY\'\nimport sys\n'
            + PROC_READERS
            + '\nopen(sys.argv[1], "w").write("\\n".join(cmdline(int(sys.argv[2]))))\nPY\n'
        )
        async with isolated_console() as c:
            bob = await user(c, "bob")
            planted = {"FORGE_PEX_VENV": str(evil), "PEX_MODULE": "os:getcwd", "FORGE_ZYGOTE_SPECS": str(evil)}
            job = await bob.submit_custom(probe, env=planted)
            done = await finish(bob, job.job_id)
            assert done.state == st.JOB_STATE_SUCCEEDED, await bob.logs(job.job_id)
            python, flag, entry = (out_dir(c, job.job_id) / "runner").read_text().split("\n")
            shared = state_dir(c) / "pex-shared" / "venvs"
            assert flag == "-I" and pathlib.Path(entry).is_relative_to(shared), (python, entry)
            assert not marker.exists(), marker.read_text()
            assert sorted(p.name for p in evil.iterdir()) == ["bin", "pex"]  # no spec went there
    finally:
        shutil.rmtree(evil, ignore_errors=True)
