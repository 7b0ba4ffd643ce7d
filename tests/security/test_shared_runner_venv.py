"""The runner venv the executor shares between jobs of different uids (executor_svc/local/pex_warm.py).

The hostile tenant is bob's job: it finds the shared venv through its own environment
(FORGE_PEX_VENV, the venv bootstrap.sh started), and tries to change the code the next job will run
(the runner's modules, the venv's interpreter link, its `.last-access`), or to leave a file there.
Every write must be refused, and alice's job, started after it, must run from the same shared venv.
"""

from __future__ import annotations

import pathlib

from starforge_api.job.v1 import job_state_pb2 as st

from tests.security.isolation_support import finish, isolated_console, out_dir, read_json, state_dir, submit, user

ATTACK = r"""#!/bin/sh
set -u
python3 - "$FORGE_OUT_DIR/attack.json" <<'PY'
import glob, json, os, sys
venv = os.environ.get("FORGE_PEX_VENV", "")
venvs = os.path.dirname(os.path.dirname(os.path.dirname(venv)))  # <shared>/venvs/<v>/<pex>/<python>
result = {"venv": venv, "venvs": venvs, "writes": {}}
targets = [os.path.join(venvs, "planted"), os.path.join(venv, "pex"), os.path.join(venv, "__main__.py")]
targets += glob.glob(os.path.join(venv, "lib", "python*", "site-packages", "sfrunner", "*.py"))
for path in targets:
    try:
        with open(path, "a") as f:
            f.write("\nraise SystemExit('pwned')\n")
        result["writes"][path] = "done"
    except OSError as exc:
        result["writes"][path] = exc.strerror
for d in [os.path.join(venv, "bin")]:
    try:
        os.symlink("/bin/true", os.path.join(d, "python-planted"))
        result["writes"][d] = "done"
    except OSError as exc:
        result["writes"][d] = exc.strerror
json.dump(result, open(sys.argv[1], "w"))
PY
"""

VICTIM = """#!/bin/sh
echo "$FORGE_PEX_VENV" > "$FORGE_OUT_DIR/venvs"
tr '\\0' ' ' < /proc/$PPID/cmdline > "$FORGE_OUT_DIR/runner"
echo ok
"""


async def test_a_job_cannot_change_the_shared_runner_venv() -> None:
    async with isolated_console() as c:
        bob, alice = await user(c, "bob"), await user(c, "alice")
        attack = await submit(bob, ATTACK)
        done = await finish(bob, attack.job_id)
        assert done.state == st.JOB_STATE_SUCCEEDED, await bob.logs(attack.job_id)
        report = read_json(out_dir(c, attack.job_id) / "attack.json")
        shared = state_dir(c) / "pex-shared" / "venvs"
        assert report["venvs"] == str(shared), report  # the job did start from the shared venv
        assert pathlib.Path(report["venv"]).is_relative_to(shared), report
        assert len(report["writes"]) >= 5, report  # it found the runner's modules, the venv's mains and its bin
        assert set(report["writes"].values()) == {"Permission denied"}, report
        assert not (shared / "planted").exists()

        victim = await submit(alice, VICTIM)
        done = await finish(alice, victim.job_id)
        assert done.state == st.JOB_STATE_SUCCEEDED, await alice.logs(victim.job_id)
        assert pathlib.Path(out_dir(c, victim.job_id) / "venvs").read_text().strip() == report["venv"]
        # and its runner is that venv's own entry, exec'd by bootstrap.sh after the integrity check
        runner = pathlib.Path(out_dir(c, victim.job_id) / "runner").read_text().split()
        assert runner == [f"{report['venv']}/bin/python", "-I", f"{report['venv']}/pex"], runner
