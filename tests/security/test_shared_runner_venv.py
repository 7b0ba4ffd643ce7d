"""The runner venv the executor shares between jobs of different uids (executor_svc/local/pex_warm.py).

The hostile tenant is bob's job: it finds the shared venv through its own environment
(FORGE_PEX_VENV, the venv bootstrap.sh started), and tries to change the code the next job will run
(the runner's modules, the venv's interpreter link, its `.last-access`), or to leave a file there.
Every write must be refused, and alice's job, started after it, must run from the same shared venv.
"""

from __future__ import annotations

import pathlib
import shutil
import tempfile

import pytest
from starforge_api.job.v1 import job_state_pb2 as st

from control import embedded
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


@pytest.mark.parametrize("warmed", [False, True], ids=["installed-by-the-first-job", "warmed-at-start"])
async def test_a_job_cannot_change_the_shared_runner_venv(warmed: bool) -> None:
    """Also when the executor installed the venv and started its zygote before any job
    (`local.warm_capsule`): bob's job then finds it through the same variables."""
    local = {"warm_capsule": str(embedded.ensure_capsule())} if warmed else None
    async with isolated_console(local=local) as c:
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


PLANT = r"""#!/bin/sh
set -u
python3 - "$FORGE_OUT_DIR/attack.json" <<'PY'
import glob, json, os, sys
root = "SHARED"  # bob chose the folder: he needs no variable to find it
found = sorted(glob.glob(os.path.join(root, "**", "*.py"), recursive=True))
planted = []
for path in found:
    try:
        with open(path, "a") as f:
            f.write("\nraise SystemExit('pwned by bob')\n")
        planted.append(path)
    except OSError:
        pass
seen = os.environ.get("PEX_ROOT", "")
json.dump({"pex_root": seen, "found": found, "planted": planted}, open(sys.argv[1], "w"))
PY
"""


async def test_a_pex_root_two_tenants_share_never_holds_their_runners() -> None:
    """Both tenants' jobs set PEX_ROOT to one world-writable folder (a tutorial's `/tmp/pex`). Had
    their runners used it, bob's runner would have unpacked pex's bootstrap and the runner there
    under bob's uid, his job would have rewritten that code, and alice's runner would have run it
    with her run token and secrets. The job's PEX_ROOT is its command's; the runner's is the
    executor's."""
    shared = pathlib.Path(tempfile.mkdtemp(prefix="sf-shared-pex-", dir="/tmp"))
    shared.chmod(0o1777)
    try:
        async with isolated_console() as c:
            bob, alice = await user(c, "bob"), await user(c, "alice")
            attack = await bob.submit_custom(PLANT.replace("SHARED", str(shared)), env={"PEX_ROOT": str(shared)})
            done = await finish(bob, attack.job_id)
            assert done.state == st.JOB_STATE_SUCCEEDED, await bob.logs(attack.job_id)
            report = read_json(out_dir(c, attack.job_id) / "attack.json")
            assert report["found"] == [] and report["planted"] == [], report  # no runner code there
            assert report["pex_root"] == str(shared), report  # and the job's command has its PEX_ROOT

            victim = await alice.submit_custom(
                VICTIM + 'echo "$PEX_ROOT" > "$FORGE_OUT_DIR/pex_root"\n', env={"PEX_ROOT": str(shared)}
            )
            done = await finish(alice, victim.job_id)
            assert done.state == st.JOB_STATE_SUCCEEDED, await alice.logs(victim.job_id)
            out = out_dir(c, victim.job_id)
            assert (out / "pex_root").read_text().strip() == str(shared)
            venv = (out / "venvs").read_text().strip()
            assert pathlib.Path(venv).is_relative_to(state_dir(c) / "pex-shared" / "venvs"), venv
            runner = (out / "runner").read_text().split()
            assert runner == [f"{venv}/bin/python", "-I", f"{venv}/pex"], runner
    finally:
        shutil.rmtree(shared, ignore_errors=True)
