"""The slurm executor against the real Slurm 24.11 test cluster (no mocks).

Capsules here are shell scripts (`shell_capsule`): what matters is what the executor does with
Slurm. The real capsule (bootstrap.sh + runner.pex reporting to a control plane) runs in
test_e2e.py through `sf`. On a failure, the attempt's files are under the staging dir the
assertion message names (job.sh, job.log, outcome), and the cluster's logs under its run dir.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import re
import time
import uuid

import httpx
import pytest
from starforge_api.executor.v1 import executor_service_pb2 as ex_pb
from starforge_api.job.v1 import job_spec_pb2 as spec_pb
from starforge_api.job.v1 import job_state_pb2 as st

from common import errors
from executor_svc.base import LABEL_EXECUTOR
from executor_svc.slurm import DATA_PARSER, SlurmExecutor
from executor_svc.slurm.staging import AttemptRecord
from tests.integration.backends.slurm import ClusterInfo
from tests.integration.blob_server import BlobServer
from tests.integration.executors.launch_requests import launch_request, shell_capsule, wait_for, wait_for_log
from tools.slurm.ray import RayInstall

from .executor_fixtures import (
    cancel_everything,
    cluster_pids,
    foreign_connections,
    make_config,
    slurm_blobs,
    slurm_executor,
    slurm_ray,
    slurm_root,
    slurm_section,
)

pytestmark = pytest.mark.slurm
__all__ = ["slurm_blobs", "slurm_executor", "slurm_ray", "slurm_root"]  # fixtures, imported for pytest

UNKNOWN_SLURM_JOB = 99_999_999  # a job id slurmctld never had: observe must fall back to the marker


def where(ex: SlurmExecutor, attempt_id: str) -> str:
    """Where to look when an assertion fails."""
    return f"(staged files: {ex.layout.attempt(attempt_id).root})"


def forget(ex: SlurmExecutor, attempt_id: str) -> None:
    """Make the attempt's record name a job slurmctld does not know, as after MinJobAge."""
    path = ex.layout.attempt(attempt_id).record
    record = AttemptRecord.load(path)
    assert record is not None
    record.slurm_job_id = UNKNOWN_SLURM_JOB
    record.save(path)


async def raw_job(info: ClusterInfo, job_id: str) -> str:
    """slurmrestd's whole answer for the job, as text (to look for leaked secrets)."""
    headers = {"X-SLURM-USER-NAME": info.user, "X-SLURM-USER-TOKEN": info.token}
    async with httpx.AsyncClient(base_url=info.restd_url, headers=headers, trust_env=False) as http:
        answer = await http.get(f"/slurm/{DATA_PARSER}/job/{job_id}")
    answer.raise_for_status()
    return answer.text


async def test_describe_reports_the_host_runtime_and_inventory(slurm_executor: SlurmExecutor) -> None:
    caps = await slurm_executor.describe()
    assert caps.kind == "slurm"
    assert caps.runtime == "host"  # image "host" jobs are sent here
    assert {
        ex_pb.EXECUTOR_CAPABILITY_MULTI_POOL,
        ex_pb.EXECUTOR_CAPABILITY_MULTI_NODE,
        ex_pb.EXECUTOR_CAPABILITY_GPUS,
    } <= caps.capabilities
    assert ex_pb.EXECUTOR_CAPABILITY_IMAGES not in caps.capabilities
    assert [(i.series, i.nodes, i.gpus_per_node) for i in caps.inventory] == [("h100", 2, 4)]


async def test_impossible_requests_are_refused(slurm_executor: SlurmExecutor, slurm_blobs: BlobServer) -> None:
    capsule = shell_capsule("true\n")
    cases = [
        (launch_request(slurm_blobs, capsule, series="a100"), "series 'a100' is not in this Slurm fleet"),
        (launch_request(slurm_blobs, capsule, series="h100", gpus=5), "its nodes have 4"),
        (
            launch_request(
                slurm_blobs, capsule, pools=[spec_pb.Pool(name="main", series="h100", nodes=3, gpus_per_node=1)]
            ),
            "this fleet has 2",
        ),
        (launch_request(slurm_blobs, capsule, series="h100", image="registry.local/x:1"), "runs capsules on the host"),
    ]
    for request, message in cases:
        with pytest.raises(errors.InvalidArgument, match=re.escape(message)):
            await slurm_executor.launch(request)
    assert await slurm_executor.list_attempts() == []


async def test_launch_is_idempotent_keeps_secrets_out_and_a_new_executor_finds_it(
    slurm_cluster: ClusterInfo, slurm_executor: SlurmExecutor, slurm_blobs: BlobServer, slurm_root: pathlib.Path
) -> None:
    ex = slurm_executor
    script = (
        'echo "hello from $FORGE_ATTEMPT_ID on $SLURMD_NODENAME in $(pwd)"\n'
        'echo "secret=${HF_TOKEN:+set} token=${FORGE_INGEST_TOKEN:-none} setting=$MY_SETTING"\n'
        'echo "token file mode $(stat -c %a "$FORGE_INGEST_TOKEN_FILE")"\n'
        'echo kept > "$FORGE_OUT_DIR/checkpoint"\n'
    )
    request = launch_request(
        slurm_blobs,
        shell_capsule(script, {"train.sh": b"echo train\n"}),
        series="h100",
        env={"MY_SETTING": "it's $fine"},
        secret_env={"HF_TOKEN": "hf-s3cret-value"},
    )
    request.ingest.token = f"ingest-{uuid.uuid4().hex}"
    attempt = request.attempt_id
    first = await ex.launch(request)
    second = await ex.launch(request)
    assert not first.already_launched
    assert (second.already_launched, second.backend_handle) == (True, first.backend_handle)
    assert first.out_dir == str(slurm_root / "out" / request.job_id)

    obs = await wait_for(ex, attempt, timeout=120)
    assert obs.state == st.JOB_STATE_SUCCEEDED, f"{obs} {where(ex, attempt)}"
    assert obs.exit_code == 0
    assert obs.backend_handle == first.backend_handle
    assert obs.node in slurm_cluster.nodes
    assert obs.start_time is not None and obs.end_time is not None
    workspace = ex.layout.attempt(attempt).workspace
    assert f"hello from {attempt} on {obs.node} in {workspace}" in obs.log_tail, where(ex, attempt)
    assert "secret=set token=none setting=it's $fine" in obs.log_tail, where(ex, attempt)
    assert "token file mode 600" in obs.log_tail, where(ex, attempt)
    token_file = ex.layout.attempt(attempt).scratch / ".forge-ingest-token"
    assert token_file.read_text() == request.ingest.token
    assert (pathlib.Path(first.out_dir) / "checkpoint").read_text() == "kept\n"

    # Secrets reach the job but are neither in its script nor anywhere slurmrestd shows.
    secrets = ("hf-s3cret-value", request.ingest.token)
    script_text = ex.layout.attempt(attempt).script.read_text()
    slurm_text = await raw_job(slurm_cluster, first.backend_handle)
    for secret in secrets:
        assert secret not in script_text
        assert secret not in slurm_text
    assert "FORGE_INGEST_TOKEN_FILE=" in script_text  # the token's file, not the token

    # A new executor over the same config finds the attempt, by its record and by its labels.
    section = slurm_section(slurm_cluster, slurm_root, executor_name=ex.cfg.executor_name)
    again = await SlurmExecutor.create(make_config(section))
    try:
        listed = {o.attempt_id: o for o in await again.list_attempts()}
        assert listed[attempt].state == st.JOB_STATE_SUCCEEDED
        ex.layout.attempt(attempt).record.unlink()  # as if the executor died right after submitting
        adopted = await again.launch(request)
        assert (adopted.already_launched, adopted.backend_handle) == (True, first.backend_handle)
        (seen,) = await again.observe([attempt])
        assert seen.state == st.JOB_STATE_SUCCEEDED
        jobs = await again._our_jobs()
        assert [j.labels[LABEL_EXECUTOR] for j in jobs] == [ex.cfg.executor_name]

        # Cleanup frees the staged files but keeps the log, the outcome and FORGE_OUT_DIR.
        assert await again.cleanup(attempt) == 4  # capsule, datasets, workspace, scratch
        dirs = again.layout.attempt(attempt)
        assert not dirs.capsule.exists() and not dirs.workspace.exists() and not dirs.scratch.exists()
        assert dirs.log.exists() and dirs.outcome.exists()
        assert (pathlib.Path(first.out_dir) / "checkpoint").exists()
        assert await again.cleanup(attempt) == 0
        (after,) = await again.observe([attempt])
        assert after.state == st.JOB_STATE_SUCCEEDED
    finally:
        await again.close()


async def test_exit_codes_fail_with_their_code_and_class_even_after_slurm_forgets(
    slurm_executor: SlurmExecutor, slurm_blobs: BlobServer
) -> None:
    ex = slurm_executor
    user = launch_request(slurm_blobs, shell_capsule('echo "about to fail" >&2\nexit 3\n'), series="h100")
    precheck = launch_request(slurm_blobs, shell_capsule("echo 'integrity check failed' >&2\nexit 97\n"), series="h100")
    await asyncio.gather(ex.launch(user), ex.launch(precheck))

    failed = await wait_for(ex, user.attempt_id, timeout=120)
    assert failed.state == st.JOB_STATE_FAILED, f"{failed} {where(ex, user.attempt_id)}"
    assert failed.exit_code == 3
    assert failed.failure_class == st.FAILURE_CLASS_USER_CODE
    assert "about to fail" in failed.log_tail
    assert "exit code 3" in failed.message

    refused = await wait_for(ex, precheck.attempt_id, timeout=120)
    assert (refused.state, refused.exit_code) == (st.JOB_STATE_FAILED, 97), where(ex, precheck.attempt_id)
    assert refused.failure_class == st.FAILURE_CLASS_PRECHECK

    # After MinJobAge slurmctld has no record; the batch script's outcome marker answers instead.
    forget(ex, user.attempt_id)
    forget(ex, precheck.attempt_id)
    late, late_precheck = await ex.observe([user.attempt_id, precheck.attempt_id])
    assert (late.state, late.exit_code, late.failure_class) == (
        st.JOB_STATE_FAILED,
        3,
        st.FAILURE_CLASS_USER_CODE,
    ), late
    assert "no longer known to slurmctld" in late.message
    assert "about to fail" in late.log_tail
    assert late.end_time is not None and late.start_time is not None
    assert (late_precheck.state, late_precheck.failure_class) == (st.JOB_STATE_FAILED, st.FAILURE_CLASS_PRECHECK)
    (never,) = await ex.observe([f"j{uuid.uuid4().hex[:13]}.1"])
    assert never.not_found


async def test_gres_gpus_are_visible_to_the_capsule(slurm_executor: SlurmExecutor, slurm_blobs: BlobServer) -> None:
    ex = slurm_executor
    script = 'echo "cuda=$CUDA_VISIBLE_DEVICES job_gpus=$SLURM_JOB_GPUS on_node=$SLURM_GPUS_ON_NODE"\n'
    request = launch_request(slurm_blobs, shell_capsule(script), series="h100", gpus=2)
    await ex.launch(request)
    obs = await wait_for(ex, request.attempt_id, timeout=120)
    assert obs.state == st.JOB_STATE_SUCCEEDED, f"{obs} {where(ex, request.attempt_id)}"
    line = next((ln for ln in obs.log_tail if ln.startswith("cuda=")), "")
    match = re.fullmatch(r"cuda=([0-3]),([0-3]) job_gpus=(\S+) on_node=2", line)
    assert match, obs.log_tail
    assert match[1] != match[2]
    assert match[3] == f"{match[1]},{match[2]}"


async def test_stop_cancels_a_running_job_and_a_second_stop_returns_false(
    slurm_executor: SlurmExecutor, slurm_blobs: BlobServer
) -> None:
    ex = slurm_executor
    # The capsule saves its work on SIGTERM, as the runner does for the training command.
    script = "trap 'echo \"got TERM, saving\"; exit 0' TERM\necho started\nwhile :; do sleep 0.2; done\n"
    request = launch_request(slurm_blobs, shell_capsule(script), series="h100")
    attempt = request.attempt_id
    await ex.launch(request)
    running = await wait_for_log(ex, attempt, "started", timeout=120)
    assert running.state == st.JOB_STATE_RUNNING, running
    with pytest.raises(errors.FailedPrecondition, match="still runs"):
        await ex.cleanup(attempt)

    assert await ex.stop(attempt, 5.0) is True
    stopped = await wait_for(ex, attempt, timeout=60)
    assert stopped.state == st.JOB_STATE_STOPPED, f"{stopped} {where(ex, attempt)}"
    assert "stopped by StarForge" in stopped.message
    # One SIGTERM, handled: the job ended by itself within the grace, before any cancel.
    assert stopped.log_tail.count("got TERM, saving") == 1, stopped.log_tail
    assert stopped.exit_code == 0
    assert await ex.stop(attempt, 5.0) is False
    assert await ex.stop(f"j{uuid.uuid4().hex[:13]}.1", 5.0) is False

    deadline = time.monotonic() + 30  # the script writes its outcome while Slurm ends the steps
    while not ex.layout.attempt(attempt).outcome.exists():
        assert time.monotonic() < deadline, f"no outcome marker {where(ex, attempt)}"
        await asyncio.sleep(0.2)
    forget(ex, attempt)
    (late,) = await ex.observe([attempt])
    assert late.state == st.JOB_STATE_STOPPED, late
    assert await ex.cleanup(attempt) == 4


async def test_heterogeneous_job_runs_one_component_per_pool(
    slurm_cluster: ClusterInfo, slurm_blobs: BlobServer, slurm_root: pathlib.Path
) -> None:
    section = slurm_section(slurm_cluster, slurm_root, ray={"enabled": False})
    ex = await SlurmExecutor.create(make_config(section))
    try:
        script = (
            'echo "component0 cuda=$CUDA_VISIBLE_DEVICES"\n'
            "srun --het-group=1 --overlap sh -c 'echo \"component1 gpus=$SLURM_GPUS_ON_NODE\"'\n"
        )
        pools = [
            spec_pb.Pool(name="main", series="h100", nodes=1, gpus_per_node=1),
            spec_pb.Pool(name="rollout", series="h100", nodes=1, gpus_per_node=2),
        ]
        request = launch_request(slurm_blobs, shell_capsule(script), pools=pools)
        launched = await ex.launch(request)
        obs = await wait_for(ex, request.attempt_id, timeout=120)
        assert obs.state == st.JOB_STATE_SUCCEEDED, f"{obs} {where(ex, request.attempt_id)}"
        assert re.fullmatch(r"n[12]\+n[12]", obs.node), obs.node
        assert "component1 gpus=2" in obs.log_tail, obs.log_tail
        assert any(re.fullmatch(r"component0 cuda=[0-3]", ln) for ln in obs.log_tail), obs.log_tail
        job = await ex.client.get_job(int(launched.backend_handle))
        assert job is not None and [p.het_job_offset for p in job.components] == [0, 1]
        # One component per pool, each with its pool's gres.
        raw = {
            entry["job_id"]: entry["tres_per_node"]
            for part in job.components
            for entry in json.loads(await raw_job(slurm_cluster, str(part.job_id)))["jobs"]
        }
        assert [raw[part.job_id] for part in job.components] == ["gres/gpu:h100:1", "gres/gpu:h100:2"], raw
    finally:
        await cancel_everything(ex)
        await ex.close()


async def test_two_node_job_gets_a_ray_cluster_on_loopback_only(
    slurm_cluster: ClusterInfo,
    slurm_executor: SlurmExecutor,
    slurm_blobs: BlobServer,
    slurm_ray: RayInstall,
) -> None:
    ex = slurm_executor
    script = """python3 - <<'EOF'
import ray
ray.init(logging_level="ERROR", log_to_driver=False)
nodes = [n for n in ray.nodes() if n["Alive"]]
addresses = " ".join(sorted(n["NodeManagerAddress"] for n in nodes))
gpus = sum(n["Resources"].get("GPU", 0) for n in nodes)
pools = sum(n["Resources"].get("pool:main", 0) for n in nodes)
print(f"ray-nodes {len(nodes)} {addresses} gpus={gpus:g} pool={pools:g}", flush=True)
EOF
"""
    pools = [spec_pb.Pool(name="main", series="h100", nodes=2, gpus_per_node=1)]
    request = launch_request(slurm_blobs, shell_capsule(script), pools=pools)
    attempt = request.attempt_id
    await ex.launch(request)
    foreign: list[str] = []
    deadline = time.monotonic() + 280
    while True:
        foreign += foreign_connections(cluster_pids(slurm_cluster))
        (obs,) = await ex.observe([attempt])
        if obs.state in (st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, st.JOB_STATE_STOPPED):
            break
        assert time.monotonic() < deadline, f"{obs} {where(ex, attempt)}"
        await asyncio.sleep(0.5)
    log = ex.layout.attempt(attempt).log.read_text()
    assert obs.state == st.JOB_STATE_SUCCEEDED, f"{obs}\n{log[-3000:]}"
    assert "ray-nodes 2 127.0.0.2 127.0.0.3 gpus=2 pool=2" in obs.log_tail, log[-3000:]
    assert "starforge: Ray cluster ready at 127.0.0.2:" in log
    assert "Token authentication is disabled" not in log  # a per-job token guards the Ray cluster
    assert foreign == [], "Ray (or anything in the cluster) talked to a non-loopback address"
