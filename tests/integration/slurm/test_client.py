"""The slurmrestd client against the real Slurm 24.11 test cluster (no mocks)."""

from __future__ import annotations

import pathlib
import re
import socket
import uuid

import httpx
import pytest
from starforge_api.job.v1 import job_state_pb2 as st

from common import errors
from executor_svc.base import LABEL_ATTEMPT, LABEL_JOB, LABEL_MANAGED, MANAGED_BY
from executor_svc.slurm import DATA_PARSER, BatchJob, JobComponent, SlurmClient, job_ledger_state
from executor_svc.slurm.errors import error_for
from tests.integration.backends.slurm import ClusterInfo

from .helpers import wait_for_state

pytestmark = pytest.mark.slurm


def batch(workdir: pathlib.Path, name: str, body: str, **kwargs: object) -> BatchJob:
    """A job whose stdout and stderr land in `workdir` (read back from the host)."""
    return BatchJob(
        name=name,
        script="#!/bin/sh\n" + body + "\n",
        working_directory=str(workdir),
        standard_output=str(workdir / f"{name}.out"),
        standard_error=str(workdir / f"{name}.err"),
        **kwargs,  # type: ignore[arg-type]
    )


async def test_ping_reports_the_pinned_version(slurm: SlurmClient) -> None:
    info = await slurm.ping()
    assert info.release.startswith("24.11"), info
    assert info.data_parser == f"data_parser/{DATA_PARSER}"
    assert info.responding
    assert info.cluster == "starforge"


async def test_job_runs_python_in_the_staging_dir_and_succeeds(
    slurm: SlurmClient, workdir: pathlib.Path, slurm_cluster: ClusterInfo
) -> None:
    job = batch(workdir, "hello", 'hostname; python3 -c "print(1)"; pwd', labels={LABEL_JOB: "jhello"})
    submitted = await slurm.submit(job)
    assert submitted.job_id > 0
    assert submitted.warnings == (), "every field we send must be known to the pinned data_parser"

    done = await wait_for_state(slurm, submitted.job_id)
    assert done.state == "COMPLETED", done
    assert done.exit_code == 0
    assert done.partition == slurm_cluster.partition
    assert done.nodes in slurm_cluster.nodes
    assert done.labels == {LABEL_JOB: "jhello"}
    assert done.start_time is not None
    assert done.end_time is not None
    mapped = job_ledger_state(done)
    assert mapped.state == st.JOB_STATE_SUCCEEDED
    assert mapped.failure_class == st.FAILURE_CLASS_UNSPECIFIED
    lines = (workdir / "hello.out").read_text().split()
    assert lines == [socket.gethostname(), "1", str(workdir)], "written by the job, read on the host"


async def test_nonzero_exit_fails_with_its_exit_code(slurm: SlurmClient, workdir: pathlib.Path) -> None:
    submitted = await slurm.submit(batch(workdir, "exit3", "echo bye >&2; exit 3"))
    done = await wait_for_state(slurm, submitted.job_id)
    assert done.state == "FAILED"
    assert done.exit_code == 3
    assert done.exit_signal is None
    mapped = job_ledger_state(done)
    assert mapped.state == st.JOB_STATE_FAILED
    assert mapped.failure_class == st.FAILURE_CLASS_USER_CODE
    assert "exit code 3" in mapped.message
    assert (workdir / "exit3.err").read_text() == "bye\n"


async def test_cancel_running_job_stops_it_and_cancel_again_is_harmless(
    slurm: SlurmClient, workdir: pathlib.Path
) -> None:
    submitted = await slurm.submit(batch(workdir, "sleeper", "echo started; sleep 600"))
    running = await wait_for_state(slurm, submitted.job_id, {st.JOB_STATE_RUNNING})
    assert running.state == "RUNNING"

    assert await slurm.cancel(submitted.job_id) is True
    done = await wait_for_state(slurm, submitted.job_id, timeout=20)
    assert done.state == "CANCELLED"
    assert job_ledger_state(done).state == st.JOB_STATE_STOPPED

    assert await slurm.cancel(submitted.job_id) is False  # already ended: no error
    assert await slurm.cancel(99_999_999) is False  # never existed: no error
    assert await slurm.get_job(99_999_999) is None


async def test_pending_job_maps_to_pending_and_cancels(slurm: SlurmClient, workdir: pathlib.Path) -> None:
    whole_cluster = JobComponent(nodes=2, tasks_per_node=1, cpus_per_task=8)
    blocker = await slurm.submit(batch(workdir, "blocker", "sleep 600"), whole_cluster)
    await wait_for_state(slurm, blocker.job_id, {st.JOB_STATE_RUNNING})
    waiting = await slurm.submit(batch(workdir, "waiting", "true"), whole_cluster)
    pending = await wait_for_state(slurm, waiting.job_id, {st.JOB_STATE_PENDING})
    assert pending.state == "PENDING"
    assert pending.exit_code is None
    assert pending.start_time is None
    assert job_ledger_state(pending).message.startswith("Slurm state PENDING")

    assert await slurm.cancel(waiting.job_id) is True
    assert await slurm.cancel(blocker.job_id) is True
    for job_id in (waiting.job_id, blocker.job_id):
        done = await wait_for_state(slurm, job_id, timeout=20)
        assert (done.state, job_ledger_state(done).state) == ("CANCELLED", st.JOB_STATE_STOPPED)


async def test_heterogeneous_job_runs_one_component_per_node(
    slurm: SlurmClient, workdir: pathlib.Path, slurm_cluster: ClusterInfo
) -> None:
    script = (
        "echo leader $SLURMD_NODENAME\n"
        "srun --het-group=1 sh -c 'echo member $SLURMD_NODENAME'\n"
        "srun --het-group=0,1 sh -c 'echo step $SLURMD_NODENAME'"
    )
    # A component asking for all 8 CPUs of a node cannot share one with the other.
    whole_node = JobComponent(nodes=1, tasks=1, cpus_per_task=8)
    submitted = await slurm.submit_heterogeneous(
        batch(workdir, "het", script, labels={LABEL_ATTEMPT: "jhet.1"}), [whole_node, whole_node]
    )
    assert submitted.warnings == ()
    done = await wait_for_state(slurm, submitted.job_id)
    assert job_ledger_state(done).state == st.JOB_STATE_SUCCEEDED, job_ledger_state(done)
    assert done.job_id == submitted.job_id
    assert done.is_het_leader
    assert [part.het_job_offset for part in done.components] == [0, 1]
    assert sorted(part.nodes for part in done.components) == sorted(slurm_cluster.nodes)
    lines = (workdir / "het.out").read_text().splitlines()
    leader, member = done.components[0].nodes, done.components[1].nodes
    assert lines[:2] == [f"leader {leader}", f"member {member}"], lines
    assert sorted(lines[2:]) == sorted([f"step {leader}", f"step {member}"])


async def test_two_node_job_starts_a_task_on_each_node(slurm: SlurmClient, workdir: pathlib.Path) -> None:
    body = "srun sh -c 'echo \"task $SLURM_PROCID on $SLURMD_NODENAME\"'"
    submitted = await slurm.submit(batch(workdir, "two", body), JobComponent(nodes=2, tasks=2))
    done = await wait_for_state(slurm, submitted.job_id)
    assert done.state == "COMPLETED", done
    assert done.nodes == "n[1-2]"
    lines = sorted((workdir / "two.out").read_text().splitlines())
    assert lines == ["task 0 on n1", "task 1 on n2"]


async def test_gpu_gres_request_sets_visible_devices(slurm: SlurmClient, workdir: pathlib.Path) -> None:
    body = 'echo "CUDA=$CUDA_VISIBLE_DEVICES GPUS=$SLURM_JOB_GPUS ON_NODE=$SLURM_GPUS_ON_NODE"'
    submitted = await slurm.submit(batch(workdir, "gpu", body), JobComponent(gres_per_node="gpu:2"))
    typed = await slurm.submit(batch(workdir, "typed", body), JobComponent(gres_per_node="gpu:h100:1"))
    done = await wait_for_state(slurm, submitted.job_id)
    assert done.state == "COMPLETED", done
    assert (workdir / "gpu.out").read_text().strip() == "CUDA=0,1 GPUS=0,1 ON_NODE=2"
    done = await wait_for_state(slurm, typed.job_id)
    assert done.state == "COMPLETED", done
    # Either job may run first on a node, so the single typed GPU is any of the node's four.
    assert re.fullmatch(r"CUDA=([0-3]) GPUS=\1 ON_NODE=1", (workdir / "typed.out").read_text().strip())


async def test_impossible_requests_are_refused_with_slurms_reason(slurm: SlurmClient, workdir: pathlib.Path) -> None:
    with pytest.raises(errors.InvalidArgument, match="Requested node configuration is not available"):
        await slurm.submit(batch(workdir, "toomany", "true"), JobComponent(gres_per_node="gpu:5"))
    with pytest.raises(errors.InvalidArgument, match="Invalid partition name specified"):
        await slurm.submit(batch(workdir, "nopart", "true", partition="nope"))
    with pytest.raises(errors.InvalidArgument, match="gres_per_node"):
        await slurm.submit(batch(workdir, "badgres", "true"), JobComponent(gres_per_node="2 gpus"))
    with pytest.raises(errors.InvalidArgument, match="environment"):
        await slurm.submit(batch(workdir, "noenv", "true", environment={}))
    with pytest.raises(errors.InvalidArgument, match="at least two components"):
        await slurm.submit_heterogeneous(batch(workdir, "het1", "true"), [JobComponent()])


async def test_list_jobs_by_label_finds_exactly_our_job(slurm: SlurmClient, workdir: pathlib.Path) -> None:
    attempt = f"j{uuid.uuid4().hex[:13]}.1"
    labels = {LABEL_ATTEMPT: attempt, LABEL_JOB: attempt[:-2], LABEL_MANAGED: MANAGED_BY}
    ours = await slurm.submit(batch(workdir, "labelled", "true", labels=labels))
    other = await slurm.submit(batch(workdir, "other", "true", labels={LABEL_MANAGED: MANAGED_BY}))

    found = await slurm.list_jobs({LABEL_ATTEMPT: attempt})
    assert [job.job_id for job in found] == [ours.job_id]
    assert found[0].labels == labels
    managed = {job.job_id for job in await slurm.list_jobs({LABEL_MANAGED: MANAGED_BY})}
    assert {ours.job_id, other.job_id} <= managed
    assert await slurm.list_jobs({LABEL_ATTEMPT: "j-none.1"}) == []
    both = await slurm.get_jobs([ours.job_id, other.job_id, 99_999_999])
    assert set(both) == {ours.job_id, other.job_id}


async def test_bad_token_is_unauthenticated_with_slurms_message(slurm_cluster: ClusterInfo) -> None:
    async with SlurmClient(slurm_cluster.restd_url, user=slurm_cluster.user, token="not-a-jwt") as bad:
        with pytest.raises(errors.Unauthenticated) as refused:
            await bad.list_jobs()
        assert "Protocol authentication error" in refused.value.message
        assert "HTTP 511" in refused.value.message
        assert "scontrol token" in refused.value.message
        with pytest.raises(errors.Unauthenticated):
            await bad.ping()
    with pytest.raises(errors.InvalidArgument, match="needs a Slurm user name and a JWT"):
        SlurmClient(slurm_cluster.restd_url, user=slurm_cluster.user, token="")


async def test_missing_token_header_maps_to_unauthenticated(slurm_cluster: ClusterInfo) -> None:
    # The client always sends both headers; a request without them shows what a 401 becomes.
    async with httpx.AsyncClient(base_url=slurm_cluster.restd_url) as raw:
        answer = await raw.get(f"/slurm/{DATA_PARSER}/jobs/", headers={"X-SLURM-USER-NAME": "starforge"})
    assert answer.status_code == 401
    error = error_for(base_url=slurm_cluster.restd_url, what="list jobs", http_status=401, body_text=answer.text)
    assert isinstance(error, errors.Unauthenticated)
    assert "Authentication failure (HTTP 401)" in error.message


async def test_unknown_api_version_is_a_failed_precondition(slurm_cluster: ClusterInfo) -> None:
    async with SlurmClient(slurm_cluster.restd_url, user="starforge", token="t") as client:
        client._http.base_url = httpx.URL(slurm_cluster.restd_url + "/not-slurm")
        with pytest.raises(errors.FailedPrecondition, match=f"does not serve data_parser {DATA_PARSER}"):
            await client.ping()


async def test_unreachable_restd_is_unavailable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound but not listening: connections are refused
        async with SlurmClient(f"http://127.0.0.1:{port}", user="u", token="t", timeout_s=2) as client:
            with pytest.raises(errors.Unavailable, match="cannot reach slurmrestd"):
                await client.ping()
