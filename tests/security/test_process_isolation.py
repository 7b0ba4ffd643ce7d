"""The process runtime keeps jobs apart: each runs as its own uid (local.job_uid_range).

The hostile tenant is the code inside bob's own job, on the same node as a job of alice that is
still running. It tries to read the console's admin token, the environment of alice's processes
(`/proc/<pid>/environ`, which holds her job's variables and tokens), and alice's scratch and out
dirs, and to write into them. Every attempt must be refused, and alice's job must finish as if
nothing happened.
"""

from __future__ import annotations

import json
import os
import pathlib
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile

from starforge_api.job.v1 import job_state_pb2 as st

from tests.ports import free_port
from tests.security.isolation_support import (
    attempt_dir,
    finish,
    isolated_console,
    out_dir,
    read_json,
    submit,
    user,
    wait_file,
)

VICTIM = """#!/bin/sh
echo "alice's secret" > "$FORGE_SCRATCH_DIR/secret.txt"
echo "alice's checkpoint" > "$FORGE_OUT_DIR/ckpt.txt"
id -u > "$FORGE_OUT_DIR/uid"
while [ ! -e "$FORGE_OUT_DIR/release" ]; do sleep 0.1; done
test "$(cat "$FORGE_OUT_DIR/ckpt.txt")" = "alice's checkpoint"
test ! -e "$FORGE_OUT_DIR/pwned" && test ! -e "$FORGE_SCRATCH_DIR/pwned"
echo victim done
"""

ATTACK_PY = r"""
import json, os, sys
victim_job, admin_token, victim_scratch, victim_out = sys.argv[1:5]
result = {"uid": os.getuid(), "environ_read": [], "environ_refused": 0, "environ_leaked": [], "files": {}}

def attempt(name, fn):
    try:
        fn()
        result["files"][name] = "done"
    except OSError as exc:
        result["files"][name] = exc.strerror

def read(path):
    with open(path, "rb") as f:
        f.read()

def write(path):
    with open(path, "w") as f:
        f.write("pwned by bob")

attempt("admin-token", lambda: read(admin_token))
attempt("list victim scratch", lambda: os.listdir(victim_scratch))
attempt("read victim scratch", lambda: read(os.path.join(victim_scratch, "secret.txt")))
attempt("write victim scratch", lambda: write(os.path.join(victim_scratch, "pwned")))
attempt("list victim out", lambda: os.listdir(victim_out))
attempt("read victim out", lambda: read(os.path.join(victim_out, "ckpt.txt")))
attempt("write victim out", lambda: write(os.path.join(victim_out, "pwned")))
attempt("overwrite victim checkpoint", lambda: write(os.path.join(victim_out, "ckpt.txt")))
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read()
    except PermissionError:
        result["environ_refused"] += 1
        continue
    except OSError:
        continue
    result["environ_read"].append(int(pid))
    if ("FORGE_JOB_ID=" + victim_job).encode() in env:
        result["environ_leaked"].append(int(pid))
with open(os.path.join(os.environ["FORGE_OUT_DIR"], "attack.json"), "w") as f:
    json.dump(result, f)
"""


def _victim_pids(job_id: str) -> list[tuple[int, int]]:
    """(pid, uid) of processes whose environment names alice's job (read as root, by the test)."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes()
            uid = entry.stat().st_uid
        except OSError:
            continue
        if f"FORGE_JOB_ID={job_id}".encode() in env:
            found.append((int(entry.name), uid))
    return found


async def test_a_job_cannot_reach_another_jobs_environment_files_or_the_console_token() -> None:
    async with isolated_console() as admin:
        alice, bob = await user(admin, "alice"), await user(admin, "bob")
        victim = await submit(alice, VICTIM)
        victim_out = out_dir(admin, victim.job_id)
        await wait_file(victim_out / "uid", alice, victim.job_id)
        victim_scratch = attempt_dir(admin, victim.job_id) / "scratch"
        victim_procs = _victim_pids(victim.job_id)
        assert victim_procs, "alice's job runs no process the attack could target"
        admin_token = admin.root / "console" / "admin-token"
        assert admin_token.exists()

        args = " ".join(json.dumps(str(a)) for a in (victim.job_id, admin_token, victim_scratch, victim_out))
        attacker = await submit(
            bob, f'#!/bin/sh\nexec python3 "$FORGE_WORKSPACE_DIR/attack.py" {args}\n', files={"attack.py": ATTACK_PY}
        )
        done = await finish(bob, attacker.job_id)
        assert done.state == st.JOB_STATE_SUCCEEDED, (done, await bob.logs(attacker.job_id))
        result = read_json(out_dir(admin, attacker.job_id) / "attack.json")

        victim_uid = int((victim_out / "uid").read_text())
        assert result["uid"] not in (0, os.getuid(), victim_uid)
        assert {uid for _, uid in victim_procs} <= {0, victim_uid}
        for name, outcome in result["files"].items():
            assert outcome == "Permission denied", f"{name}: {outcome} ({result})"
        assert result["environ_leaked"] == [], result
        readable_victims = {pid for pid, _ in victim_procs} & set(result["environ_read"])
        assert not readable_victims, f"bob read the environment of alice's processes {readable_victims}"
        assert result["environ_refused"] >= len(victim_procs)

        (victim_out / "release").touch()
        ended = await finish(alice, victim.job_id)
        assert ended.state == st.JOB_STATE_SUCCEEDED, (ended, await alice.logs(victim.job_id))
        assert (victim_out / "ckpt.txt").read_text() == "alice's checkpoint\n"
        assert not (victim_out / "pwned").exists()


EMBEDDED_PROBE = """#!/bin/sh
state={state}
for f in admin-token ledger.db console.yaml executor.yaml; do
	if cat "$state/$f" >/dev/null 2>&1; then echo "job read $f"; exit 3; fi
done
if ls "$state" "$state/blobs" "$state/executor/attempts" "$state/executor/blobs" >/dev/null 2>&1; then
	echo "job listed the console's directories"; exit 4
fi
if [ "$(id -u)" -eq 0 ]; then echo "job runs as root"; exit 5; fi
echo "isolated as uid $(id -u)"
"""


def test_sf_up_as_root_runs_jobs_as_their_own_uids_away_from_the_console_state() -> None:
    """`sf up` (the embedded console) as root, with a state dir others may pass: the job is bob's
    kind of hostile code, run through the real CLI; it cannot read the console's files."""
    root = pathlib.Path(tempfile.mkdtemp(prefix="sf-up-iso-", dir="/tmp"))
    root.chmod(0o711)
    state, lab = root / "state", root / "lab"
    sf = str(pathlib.Path(sys.executable).parent / "sf")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STARFORGE_")}
    env |= {
        "STARFORGE_CLIENT_CONFIG": str(root / "client.yaml"),
        "STARFORGE_HOME": str(state),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@starforge.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@starforge.invalid",
    }

    def run(*args: str, cwd: pathlib.Path = root) -> str:
        r = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)
        assert r.returncode == 0, f"{' '.join(args)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
        return r.stdout

    port = free_port()
    try:
        run(sf, "up", "--state-dir", str(state), "--listen", f"127.0.0.1:{port}", "--detach")
        assert "job_uid_range" in (state / "executor.yaml").read_text()
        run(sf, "init", str(lab), "--name", "lab")
        run("git", "init", "-q", cwd=lab)
        run(sf, "new", "probe", "--method", "custom/custom", cwd=lab)
        train = lab / "experiments" / "probe" / "train.sh"
        train.write_text(EMBEDDED_PROBE.format(state=shlex.quote(str(state))))
        run("git", "add", "-A", cwd=lab)
        run("git", "commit", "-qm", "probe", cwd=lab)
        out = run(sf, "submit", "probe", "--profile", "cpu", "--follow", cwd=lab)
        assert "isolated as uid 2" in out, out
        assert stat.S_IMODE((state / "admin-token").stat().st_mode) == 0o600
    finally:
        subprocess.run([sf, "down", "--state-dir", str(state)], env=env, capture_output=True, timeout=60, check=False)
        shutil.rmtree(root, ignore_errors=True)
