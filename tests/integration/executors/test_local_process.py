"""The local executor with the `process` runtime: real processes, real BlobService, real bootstrap."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
from collections.abc import AsyncIterator

import pytest
from starforge_api.executor.v1 import executor_service_pb2 as ex_pb
from starforge_api.job.v1 import job_spec_pb2 as spec_pb
from starforge_api.job.v1 import job_state_pb2 as st

from common import errors, ids
from common.dir_spread import FS_TOPDIR_FL
from executor_svc import bundle
from executor_svc.local import LocalConfig, LocalExecutor, SeriesConfig
from executor_svc.local.process_runtime import group_alive
from tests.integration.blob_server import BlobServer
from tests.integration.executors.launch_requests import (
    DUMP_ENV,
    RECORD_START,
    WAIT_FOR_RELEASE,
    launch_request,
    read_env,
    shell_capsule,
    stop_everything,
    verified_capsule,
    wait_for,
    wait_for_log,
)
from tests.unit.test_dir_spread import EXT, flags, fs_type

SLEEP = 'echo "sleeping"\nsleep 600\n'


def config(state_dir: pathlib.Path, **kw: object) -> LocalConfig:
    inventory = [SeriesConfig("cpu", gpus=0, slots=2), SeriesConfig("h200", gpus=8, real_gpus=False)]
    return LocalConfig(state_dir=state_dir, runtime="process", node_name="node-a", inventory=inventory, **kw)  # type: ignore[arg-type]


@pytest.fixture
async def executor(tmp_path: pathlib.Path) -> AsyncIterator[LocalExecutor]:
    ex = await LocalExecutor.create(config(tmp_path / "state"))
    try:
        yield ex
    finally:
        await stop_everything(ex)
        await ex.close()


async def test_runs_to_success_with_the_capsule_environment(
    executor: LocalExecutor, blobs: BlobServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STARFORGE_EXECUTOR_TOKEN", "executor-secret")
    script = DUMP_ENV + 'echo "hello from $FORGE_ATTEMPT_ID"; pwd > "$FORGE_OUT_DIR/cwd"; ls -l train.sh\n'
    req = launch_request(
        blobs,
        shell_capsule(script, {"train.sh": (b"#!/bin/sh\n", True)}),
        env={"MY_SETTING": "1", "FORGE_OUT_DIR": "/not/this"},
        secret_env={"HF_TOKEN": "hf-very-secret"},
        stop_grace_seconds=7,
    )
    result = await executor.launch(req)
    assert not result.already_launched
    assert result.node == "node-a"
    assert int(result.backend_handle) > 0

    obs = await wait_for(executor, req.attempt_id)
    assert obs.state == st.JOB_STATE_SUCCEEDED, obs
    assert obs.exit_code == 0
    assert obs.end_time is not None
    assert obs.start_time is not None
    assert f"hello from {req.attempt_id}" in obs.log_tail

    attempt = executor.layout.attempt(req.attempt_id)
    out = pathlib.Path(result.out_dir)
    assert out == executor.layout.state_dir / "out" / req.job_id
    env = read_env(out / "env-1.txt")
    assert env["FORGE_CAPSULE_DIR"] == str(attempt.capsule)
    assert env["FORGE_CAPSULE_SHA256"] == req.capsule.capsule_digest
    assert env["FORGE_WORKSPACE_DIR"] == str(attempt.workspace)
    assert env["FORGE_OUT_DIR"] == str(out)  # the request cannot move it
    assert env["FORGE_SCRATCH_DIR"] == str(attempt.scratch)
    assert env["FORGE_INGEST_ADDR"] == "127.0.0.1:9"
    # the run token only in a file of the attempt's scratch dir, readable by its owner
    assert "FORGE_INGEST_TOKEN" not in env
    token_file = attempt.scratch / ".forge-ingest-token"
    assert env["FORGE_INGEST_TOKEN_FILE"] == str(token_file)
    assert token_file.read_text() == req.ingest.token
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert (env["FORGE_JOB_ID"], env["FORGE_ATTEMPT_ID"], env["FORGE_ATTEMPT_NUMBER"]) == (
        req.job_id,
        req.attempt_id,
        "1",
    )
    assert env["FORGE_RESUME"] == "0"
    assert env["FORGE_STOP_GRACE_SECONDS"] == "7"
    assert env["MY_SETTING"] == "1"
    assert env["HF_TOKEN"] == "hf-very-secret"
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert "STARFORGE_EXECUTOR_TOKEN" not in env  # the executor's environment does not leak
    assert (out / "cwd").read_text().strip() == str(attempt.workspace)
    assert "-rwxr-xr-x" in "\n".join(obs.log_tail)
    record = attempt.record.read_text()
    assert "hf-very-secret" not in record
    assert json.loads(record)["pid"] == int(result.backend_handle)


@pytest.mark.parametrize(
    ("code", "failure"),
    [(3, st.FAILURE_CLASS_UNSPECIFIED), (97, st.FAILURE_CLASS_PRECHECK), (98, st.FAILURE_CLASS_PRECHECK)],
)
async def test_nonzero_exit_fails_with_its_exit_code(
    executor: LocalExecutor, blobs: BlobServer, code: int, failure: int
) -> None:
    req = launch_request(blobs, shell_capsule(f"echo 'about to fail' >&2\nexit {code}\n"))
    await executor.launch(req)
    obs = await wait_for(executor, req.attempt_id)
    assert (obs.state, obs.exit_code, obs.failure_class) == (st.JOB_STATE_FAILED, code, failure)
    assert obs.log_tail == ["about to fail"]


async def test_oom_evidence_in_the_log_classifies_the_failure(executor: LocalExecutor, blobs: BlobServer) -> None:
    req = launch_request(blobs, shell_capsule("echo 'torch.OutOfMemoryError: CUDA out of memory.' >&2\nexit 1\n"))
    await executor.launch(req)
    obs = await wait_for(executor, req.attempt_id)
    assert obs.failure_class == st.FAILURE_CLASS_OUT_OF_MEMORY


async def test_stop_ends_the_process_group(executor: LocalExecutor, blobs: BlobServer) -> None:
    req = launch_request(blobs, shell_capsule(SLEEP))
    pid = int((await executor.launch(req)).backend_handle)
    await wait_for(executor, req.attempt_id, st.JOB_STATE_RUNNING)
    assert group_alive(pid)

    assert await executor.stop(req.attempt_id, 5.0) is True
    obs = await wait_for(executor, req.attempt_id)
    assert obs.state == st.JOB_STATE_STOPPED
    assert obs.end_time is not None
    assert not group_alive(pid)
    assert await executor.stop(req.attempt_id, 5.0) is False  # already gone


async def test_stop_kills_after_the_grace_period(executor: LocalExecutor, blobs: BlobServer) -> None:
    # TERM is ignored by the capsule (and inherited by sleep): only SIGKILL ends it.
    req = launch_request(blobs, shell_capsule("trap '' TERM\necho ready\nsleep 600\n"))
    pid = int((await executor.launch(req)).backend_handle)
    await wait_for_log(executor, req.attempt_id, "ready")  # the trap is set
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await executor.stop(req.attempt_id, 1.0) is True
    assert 0.9 < loop.time() - started < 8
    assert not group_alive(pid)
    assert (await wait_for(executor, req.attempt_id)).state == st.JOB_STATE_STOPPED


async def test_an_attempt_being_launched_is_pending(
    executor: LocalExecutor, blobs: BlobServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = asyncio.Event()
    real = bundle.materialize

    async def gated(*args: object, **kwargs: object) -> None:
        await gate.wait()
        await real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(bundle, "materialize", gated)
    req = launch_request(blobs, shell_capsule("true\n"))
    launching = asyncio.create_task(executor.launch(req))
    await asyncio.sleep(0.1)
    (obs,) = await executor.observe([req.attempt_id])
    assert obs.state == st.JOB_STATE_PENDING
    assert not obs.not_found
    gate.set()
    await launching
    assert (await wait_for(executor, req.attempt_id)).state == st.JOB_STATE_SUCCEEDED


async def test_unknown_attempts(executor: LocalExecutor) -> None:
    missing = ids.attempt_id(ids.new_job_id(), 1)
    assert await executor.stop(missing, 1.0) is False
    assert await executor.cleanup(missing) == 0
    (obs,) = await executor.observe([missing])
    assert obs.not_found
    assert obs.state == st.JOB_STATE_UNSPECIFIED
    (obs,) = await executor.observe(["../../etc"])
    assert obs.not_found


async def test_the_attempts_folder_spreads_each_attempts_tree(executor: LocalExecutor) -> None:
    # on ext4 (our machines) attempts/ is marked the top of directory hierarchies, so that each
    # attempt's tree goes to a block group of its own (common/dir_spread.py); not out/
    attempts = executor.layout.attempts_dir
    if fs_type(attempts) not in EXT:  # no such flag there: nothing to see
        return
    assert flags(attempts) & FS_TOPDIR_FL
    assert not flags(attempts.parent / "out") & FS_TOPDIR_FL


async def test_launch_is_idempotent_per_attempt_id(executor: LocalExecutor, blobs: BlobServer) -> None:
    req = launch_request(blobs, shell_capsule(RECORD_START + WAIT_FOR_RELEASE))
    results = await asyncio.gather(*(executor.launch(req) for _ in range(5)))
    assert sorted(r.already_launched for r in results) == [False, True, True, True, True]
    assert len({r.backend_handle for r in results}) == 1
    again = await executor.launch(req)
    assert again.already_launched
    assert again.backend_handle == results[0].backend_handle
    out = pathlib.Path(results[0].out_dir)
    (out / "release").touch()
    assert (await wait_for(executor, req.attempt_id)).state == st.JOB_STATE_SUCCEEDED
    assert (out / "starts").read_text().count(req.attempt_id) == 1


async def test_a_restarted_executor_finds_and_follows_running_attempts(
    tmp_path: pathlib.Path, blobs: BlobServer
) -> None:
    first = await LocalExecutor.create(config(tmp_path / "state"))
    req = launch_request(blobs, shell_capsule(RECORD_START + WAIT_FOR_RELEASE), series="h200", gpus=2)
    result = await first.launch(req)
    await wait_for(first, req.attempt_id, st.JOB_STATE_RUNNING)
    await first.close()  # the executor goes away; the job must not

    second = await LocalExecutor.create(config(tmp_path / "state"))
    try:
        (obs,) = await second.observe([req.attempt_id])
        assert obs.state == st.JOB_STATE_RUNNING
        assert obs.backend_handle == result.backend_handle
        assert [o.attempt_id for o in await second.list_attempts()] == [req.attempt_id]
        inv = {i.series: i for i in (await second.describe()).inventory}
        assert inv["h200"].free_gpus == 6  # its two GPUs are still held
        relaunch = await second.launch(req)
        assert relaunch.already_launched
        assert relaunch.backend_handle == result.backend_handle

        (pathlib.Path(result.out_dir) / "release").touch()
        obs = await wait_for(second, req.attempt_id)
        assert obs.state == st.JOB_STATE_SUCCEEDED
        assert obs.exit_code == 0
        assert {i.series: i for i in (await second.describe()).inventory}["h200"].free_gpus == 8
    finally:
        await stop_everything(second)


async def test_cleanup_keeps_out_dir_logs_and_the_outcome(executor: LocalExecutor, blobs: BlobServer) -> None:
    script = 'echo "checkpoint" > "$FORGE_OUT_DIR/ckpt"\necho scratch > "$FORGE_SCRATCH_DIR/journal"\necho done\n'
    req = launch_request(blobs, shell_capsule(WAIT_FOR_RELEASE + script, {"w.txt": b"w"}))
    result = await executor.launch(req)
    await wait_for(executor, req.attempt_id, st.JOB_STATE_RUNNING)
    with pytest.raises(errors.FailedPrecondition, match="still runs"):
        await executor.cleanup(req.attempt_id)

    out = pathlib.Path(result.out_dir)
    (out / "release").touch()
    await wait_for(executor, req.attempt_id)
    attempt = executor.layout.attempt(req.attempt_id)
    assert await executor.cleanup(req.attempt_id) == 4  # capsule, datasets, workspace, scratch
    assert not attempt.capsule.exists()
    assert not attempt.workspace.exists()
    assert not attempt.scratch.exists()
    assert (out / "ckpt").read_text() == "checkpoint\n"
    assert attempt.log.read_text().strip() == "done"
    (obs,) = await executor.observe([req.attempt_id])
    assert obs.state == st.JOB_STATE_SUCCEEDED
    assert obs.exit_code == 0
    assert obs.log_tail == ["done"]
    assert await executor.cleanup(req.attempt_id) == 0
    assert (await executor.launch(req)).already_launched  # a cleaned-up attempt is never started again


async def test_requests_this_node_can_never_run(executor: LocalExecutor, blobs: BlobServer) -> None:
    capsule = shell_capsule("true\n")
    cases = {
        "not on this node": launch_request(blobs, capsule, series="b200", gpus=1),
        "this node has 8": launch_request(blobs, capsule, series="h200", gpus=9),
        "single-pool": launch_request(
            blobs,
            capsule,
            pools=[
                spec_pb.Pool(name="train", series="h200", nodes=1, gpus_per_node=4),
                spec_pb.Pool(name="rollout", series="h200", nodes=1, gpus_per_node=4),
            ],
        ),
        "one node": launch_request(
            blobs, capsule, pools=[spec_pb.Pool(name="main", series="h200", nodes=2, gpus_per_node=8)]
        ),
    }
    for message, req in cases.items():
        with pytest.raises(errors.InvalidArgument, match=message):
            await executor.launch(req)
        assert not executor.layout.attempt(req.attempt_id).root.exists()
    bad = launch_request(blobs, capsule)
    bad.attempt_id = "../escape.1"
    with pytest.raises(errors.InvalidArgument, match="not a valid id"):
        await executor.launch(bad)


async def test_twenty_concurrent_launches_share_eight_gpus(executor: LocalExecutor, blobs: BlobServer) -> None:
    capsule = shell_capsule(RECORD_START + WAIT_FOR_RELEASE)
    reqs = [launch_request(blobs, capsule, series="h200", gpus=1) for _ in range(20)]
    results = await asyncio.gather(*(executor.launch(r) for r in reqs), return_exceptions=True)

    launched = [r for r, res in zip(reqs, results, strict=True) if not isinstance(res, BaseException)]
    refused = [r for r, res in zip(reqs, results, strict=True) if isinstance(res, BaseException)]
    assert len(launched) == 8
    assert all(isinstance(res, errors.ResourceExhausted) for res in results if isinstance(res, BaseException))
    for r in refused:  # nothing left behind by a refused launch
        assert not executor.layout.attempt(r.attempt_id).root.exists()

    def assignments() -> dict[str, list[int]]:
        found = {}
        for attempt_id in executor.layout.attempt_ids():
            rec = json.loads(executor.layout.attempt(attempt_id).record.read_text())
            if rec["stop_requested_at"] is None:
                found[attempt_id] = rec["gpus"]
        return found

    held = assignments()
    assert sorted(g for gpus in held.values() for g in gpus) == list(range(8))  # each GPU exactly once
    for r in launched:  # and that is what each job was given
        obs = await wait_for(executor, r.attempt_id, st.JOB_STATE_RUNNING)
        assert obs.state == st.JOB_STATE_RUNNING
    caps = await executor.describe()
    assert {i.series: i.free_gpus for i in caps.inventory}["h200"] == 0
    assert ex_pb.EXECUTOR_CAPABILITY_GPUS in caps.capabilities

    for r in launched[:3]:
        assert await executor.stop(r.attempt_id, 2.0)
    freed = sorted(g for r in launched[:3] for g in held[r.attempt_id])
    second = await asyncio.gather(*(executor.launch(r) for r in refused[:5]), return_exceptions=True)
    assert sum(not isinstance(x, BaseException) for x in second) == 3
    now = assignments()
    assert sorted(g for gpus in now.values() for g in gpus) == list(range(8))
    new = [a for a in now if a not in held]
    assert sorted(g for a in new for g in now[a]) == freed


async def test_cpu_slots_bound_concurrent_cpu_attempts(executor: LocalExecutor, blobs: BlobServer) -> None:
    capsule = shell_capsule(WAIT_FOR_RELEASE)
    first, second, third = (launch_request(blobs, capsule) for _ in range(3))
    await executor.launch(first)
    await executor.launch(second)
    with pytest.raises(errors.ResourceExhausted, match="slots"):
        await executor.launch(third)
    (pathlib.Path((await executor.launch(first)).out_dir) / "release").touch()
    await wait_for(executor, first.attempt_id)
    assert not (await executor.launch(third)).already_launched


async def test_a_corrupted_cache_entry_is_refused_at_launch(executor: LocalExecutor, blobs: BlobServer) -> None:
    """The executor re-hashes a changed cache entry before placing it: the launch is refused,
    naming the file, the entry is evicted, and the next launch fetches a fresh copy."""
    runner = "import os, sys\nprint('runner ran for', os.environ['FORGE_ATTEMPT_ID'])\n"
    job_id = ids.new_job_id()
    train = b"#!/bin/sh\necho training " + os.urandom(8).hex().encode() + b"\n"
    workspace = {"train.sh": (train, True)}
    first = verified_capsule(runner, workspace, job_id=job_id, attempt_id=f"{job_id}.1")
    req1 = launch_request(blobs, first, job_id=job_id, attempt_number=1)
    await executor.launch(req1)
    obs = await wait_for(executor, req1.attempt_id)
    assert obs.state == st.JOB_STATE_SUCCEEDED, obs.log_tail
    assert obs.log_tail == [f"runner ran for {req1.attempt_id}"]

    digest = next(f.sha256 for f in req1.spec.workspace.files if f.path == "train.sh")
    cached = bundle.cache_path(executor.layout.cache_dir, digest)
    cached.chmod(0o644)
    with cached.open("r+b") as f:  # in place: the cache entry now differs from its name
        f.write(b"#!/bin/sh\necho evil\n")

    second = verified_capsule(runner, workspace, job_id=job_id, attempt_id=f"{job_id}.2")
    req2 = launch_request(blobs, second, job_id=job_id, attempt_number=2)
    with pytest.raises(errors.FailedPrecondition) as refused:
        await executor.launch(req2)
    assert refused.value.message.startswith("workspace/train.sh: the executor's cache entry"), refused.value
    assert f"expected sha256 {digest}" in refused.value.message
    assert not cached.exists()

    await executor.launch(req2)
    obs = await wait_for(executor, req2.attempt_id)
    assert obs.state == st.JOB_STATE_SUCCEEDED, obs.log_tail
    assert cached.read_bytes() == train
