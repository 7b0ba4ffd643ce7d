"""Submit, follow, status and the smaller flags through the real `sf` binary against a live console."""

from __future__ import annotations

import asyncio
import json
import pathlib
import socket
import subprocess

import grpc
import pytest
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.job.v1 import job_state_pb2 as st

from tests.integration.console import Console, console


async def test_submit_follow_status_and_exit_code(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path) as c:
        ok = await c.lab("ok", "#!/usr/bin/env bash\necho hello from train.sh\n")
        r = await c.sf_async("submit", "ok", "--profile", "cpu", "--follow", cwd=ok)
        assert "hello from train.sh" in r.stdout
        bad = await c.lab("bad", "#!/usr/bin/env bash\necho failing >&2\nexit 3\n")
        r = await c.sf_async("submit", "bad", "--follow", cwd=bad, check=False)
        assert r.returncode == 1, r.stdout + r.stderr
        status = await c.sf_async("job", "status", "latest")
        assert "FAILED" in status.stdout
        assert "exit code 3" in status.stdout
        data = json.loads((await c.sf_async("-o", "json", "job", "status", "latest")).stdout)
        job = data.get("job", data)
        assert job["state"] == "JOB_STATE_FAILED"
        assert job["attempts"][-1]["exit_code"] == 3


async def test_bad_input_gets_one_message_and_nonzero_exit(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path) as c:
        lab = await c.lab("exp")
        cases = [
            (("submit", "nope"), 2, "unknown experiment"),
            (("submit", "exp", "-s", "stepz=3"), 2, "has no key 'stepz'"),
            (("submit", "exp", "--profile", "h200:12"), 2, "12 GPUs do not fill whole h200 nodes"),
        ]
        for args, code, text in cases:
            r = await c.sf_async(*args, cwd=lab, check=False)
            assert r.returncode == code, (args, r.returncode, r.stdout, r.stderr)
            assert text in (r.stderr + r.stdout), (args, r.stderr)
            assert "Traceback" not in r.stderr
        (lab / "experiments" / "exp" / "train.sh").unlink()
        r = await c.sf_async("submit", "exp", "--allow-dirty", cwd=lab, check=False)
        assert r.returncode == 2 and "train.sh" in r.stderr and "Traceback" not in r.stderr
        (lab / "starforge.yaml").write_text("project: [unclosed\n")
        r = await c.sf_async("job", "ls", cwd=lab, check=False)
        r2 = await c.sf_async("submit", "exp", cwd=lab, check=False)
        assert r2.returncode == 2 and "starforge.yaml" in r2.stderr and "Traceback" not in r2.stderr
        # wrong token
        env_token = c.token
        c.token = "sfp_aaaaaaaaaa_" + "b" * 43
        r = await c.sf_async("job", "ls", check=False)
        c.token = env_token
        assert r.returncode == 4 and "token" in r.stderr and "Traceback" not in r.stderr
        # nothing was queued by any of the refusals
        jobs = json.loads((await c.sf_async("-o", "json", "job", "ls")).stdout)
        assert (jobs.get("jobs") if isinstance(jobs, dict) else jobs) in ([], None)
        assert r is not None


async def test_console_not_reachable(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path) as c:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            dead = f"127.0.0.1:{s.getsockname()[1]}"
        r = await c.sf_async("--console", dead, "job", "ls", check=False)
        assert r.returncode == 5
        assert f"cannot reach the console at {dead}" in r.stderr
        assert "Traceback" not in r.stderr
        assert st.JOB_STATE_QUEUED


async def test_compare_runs_of_an_experiment(tmp_path: pathlib.Path) -> None:
    script = """#!/usr/bin/env bash
python3 - <<'PY'
import json, os, starforge
lr = json.load(open(os.environ["FORGE_CONFIG"]))["lr"]
for step in range(1, 6):
    starforge.report(step=step, loss=1.0 / (step * lr))
PY
"""
    async with console(tmp_path) as c:
        lab = await c.lab("exp", script, config={"lr": 1.0})
        ids = []
        for lr in ("1.0", "2.0"):
            r = await c.sf_async("-o", "json", "submit", "exp", "-s", f"lr={lr}", "--follow", cwd=lab)
            ids.append(json.loads(r.stdout.splitlines()[0]).get("job_id") if r.stdout.startswith("{") else None)
        out = json.loads((await c.sf_async("-o", "json", "job", "compare", "-e", "exp", "--name", "loss")).stdout)
        runs = {tuple(sorted(r["overrides"].items())): r for r in out["runs"]}
        assert set(runs) == {(("lr", "1.0"),), (("lr", "2.0"),)}
        latest = {k[0][1]: r["series"][0]["latest"] for k, r in runs.items()}
        assert latest == {"1.0": 0.2, "2.0": 0.1}
        text = (await c.sf_async("job", "compare", "-e", "exp")).stdout
        assert "DIFFERS BY" in text and "lr=2.0" in text


async def test_submit_with_upgrade_recipe_rewrites_a_stale_lock_and_queues_the_job(tmp_path: pathlib.Path) -> None:
    """`--upgrade-recipe` resolves the current lock with the submission's own client (it used to close
    that client and fail with "Cannot invoke RPC on closed channel", creating no job)."""
    async with console(tmp_path) as c:
        lab = await c.lab("exp")
        lock_path = lab / "experiments" / "exp" / "recipe.lock.json"
        current = json.loads(lock_path.read_text())
        stale = dict(current, digest="sha256:" + "0" * 64, version="0.0.1")
        lock_path.write_text(json.dumps(stale))
        subprocess.run(["git", "commit", "-qam", "stale lock"], cwd=lab, check=True)
        refused = await c.sf_async("submit", "exp", cwd=lab, check=False)
        assert refused.returncode == 3, refused.stderr
        assert "--upgrade-recipe" in refused.stderr
        r = await c.sf_async("-o", "json", "submit", "exp", "--upgrade-recipe", cwd=lab, check=False)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "Traceback" not in r.stderr and "closed channel" not in r.stderr
        job = json.loads(r.stdout)["job"]
        assert json.loads(lock_path.read_text())["digest"] == current["digest"]
        assert job["provenance"]["recipe_digest"] == current["digest"]
        jobs = json.loads((await c.sf_async("-o", "json", "job", "ls")).stdout)
        listed = jobs.get("jobs") if isinstance(jobs, dict) else jobs
        assert listed is not None, jobs
        assert [j["job_id"] for j in listed] == [job["job_id"]]


async def test_retries_zero_means_no_automatic_retry(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path) as c:
        lab = await c.lab("exp")
        zero = json.loads((await c.sf_async("-o", "json", "submit", "exp", "--retries", "0", cwd=lab)).stdout)["job"]
        default = json.loads((await c.sf_async("-o", "json", "submit", "exp", cwd=lab)).stdout)["job"]
        assert zero.get("retry_budget", 0) == 0
        assert default["retry_budget"] == c.app.ctx.cfg.default_retry_budget > 0


async def test_job_logs_follows_by_default_and_no_follow_prints_and_exits(tmp_path: pathlib.Path) -> None:
    mark = tmp_path / "release"
    train = f"#!/usr/bin/env bash\necho started\nwhile [ ! -e {mark} ]; do sleep 0.2; done\necho finished\n"
    async with console(tmp_path) as c:
        try:
            await _follow_and_no_follow(c, train, mark)
        finally:
            mark.touch()  # a failed assertion must not leave the job waiting forever


async def _follow_and_no_follow(c: Console, train: str, mark: pathlib.Path) -> None:
    lab = await c.lab("exp", train)
    job_id = json.loads((await c.sf_async("-o", "json", "submit", "exp", cwd=lab)).stdout)["job"]["job_id"]
    await c.wait(job_id, st.JOB_STATE_RUNNING)
    for _ in range(600):
        if any("started" in line for line in await c.logs(job_id)):
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError(f"no 'started' line: {await c.logs(job_id)}")
    printed = await c.sf_async("job", "logs", job_id, "--no-follow", timeout=60)
    assert "started" in printed.stdout and "finished" not in printed.stdout
    assert (await c.get(job_id)).state == st.JOB_STATE_RUNNING  # it returned while the job runs
    follower = asyncio.create_task(c.sf_async("job", "logs", timeout=120))  # the latest job, followed
    await asyncio.sleep(1.0)
    assert not follower.done(), (await follower).stdout
    mark.touch()
    followed = await follower
    assert followed.returncode == 0
    assert followed.stdout.index("started") < followed.stdout.index("finished")
    assert "SUCCEEDED" in followed.stderr


async def test_job_ls_filters_on_labels_and_refuses_bad_page_tokens(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path) as c:
        lab = await c.lab("exp")

        async def submit(*labels: str) -> str:
            args = [a for label in labels for a in ("--label", label)]
            r = await c.sf_async("-o", "json", "submit", "exp", *args, cwd=lab)
            return str(json.loads(r.stdout)["job"]["job_id"])

        rl = await submit("team=rl", "sweep=lr_1")
        rl2 = await submit("team=rl", "sweep=lr%")
        await submit("team=rlhf", "note=team=rl")  # neither key nor value is `team`=`rl`

        async def ls(*filters: str) -> list[str]:
            r = await c.sf_async("-o", "json", "job", "ls", *[a for f in filters for a in ("-l", f)])
            return [j["job_id"] for j in json.loads(r.stdout)["jobs"]]

        assert await ls("team=rl") == [rl2, rl]
        assert await ls("team=rl", "sweep=lr_1") == [rl]
        assert await ls("sweep=lr%") == [rl2]  # LIKE wildcards are matched literally
        assert await ls("team=nobody") == []
        bad = await c.sf_async("job", "ls", "-l", "team", check=False)
        assert bad.returncode == 2 and "KEY=VALUE" in bad.stderr
        refused = await c.sf_async("submit", "exp", "--label", 'a"b=1', cwd=lab, check=False)
        assert refused.returncode == 3 and "label key" in refused.stderr

        with pytest.raises(grpc.aio.AioRpcError) as err:
            await c.jobs.ListJobs(ctl.ListJobsRequest(page_token="not-a-token"), metadata=c.md)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "page_token" in (err.value.details() or "")


async def test_a_lab_with_only_a_name_submits_to_the_users_project(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path) as c:
        lab = await c.lab("exp")
        (lab / "starforge.yaml").write_text("name: named-lab\n")
        subprocess.run(["git", "commit", "-qam", "name only"], cwd=lab, check=True)
        job = json.loads((await c.sf_async("-o", "json", "submit", "exp", cwd=lab)).stdout)["job"]
        assert job["project"] == "@admin/named-lab"
