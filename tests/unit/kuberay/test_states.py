"""RayJob status -> ledger state (states.py), for every KubeRay value."""

from __future__ import annotations

import datetime as dt

import pytest
from starforge_api.job.v1 import job_state_pb2 as st

from executor_svc.kuberay.states import is_active, map_status

P, R, S, F, X = (
    st.JOB_STATE_PENDING,
    st.JOB_STATE_RUNNING,
    st.JOB_STATE_SUCCEEDED,
    st.JOB_STATE_FAILED,
    st.JOB_STATE_STOPPED,
)
NONE = st.FAILURE_CLASS_UNSPECIFIED
RAY_FAILED = "Job entrypoint command failed with exit code {}, last available logs (truncated to 20,000 chars):"


@pytest.mark.parametrize(
    ("deployment", "job", "reason", "message", "state", "failure"),
    [
        ("", "", "", "", P, NONE),
        ("Initializing", "", "", "", P, NONE),
        ("Waiting", "", "", "", P, NONE),
        ("Retrying", "", "", "", P, NONE),
        ("Suspending", "", "", "", P, NONE),
        ("Suspended", "", "", "", P, NONE),
        ("Scheduling", "", "", "", P, NONE),
        ("Scheduled", "", "", "", P, NONE),
        ("Running", "", "", "", P, NONE),
        ("Running", "PENDING", "", "", P, NONE),
        ("Running", "RUNNING", "", "", R, NONE),
        ("Running", "SUCCEEDED", "", "", S, NONE),
        ("Complete", "SUCCEEDED", "", "", S, NONE),
        ("Complete", "STOPPED", "", "", X, NONE),
        ("Complete", "FAILED", "", RAY_FAILED.format(1), F, st.FAILURE_CLASS_USER_CODE),
        ("Complete", "FAILED", "", RAY_FAILED.format(97), F, st.FAILURE_CLASS_PRECHECK),
        ("Complete", "FAILED", "", RAY_FAILED.format(98), F, st.FAILURE_CLASS_PRECHECK),
        (
            "Complete",
            "FAILED",
            "",
            RAY_FAILED.format(1) + "\ntorch.OutOfMemoryError: CUDA out of memory",
            F,
            st.FAILURE_CLASS_OUT_OF_MEMORY,
        ),
        (
            "Complete",
            "FAILED",
            "",
            "Job supervisor actor died: The actor died because its node has died.",
            F,
            st.FAILURE_CLASS_NODE_LOST,
        ),
        ("Complete", "FAILED", "", "Failed to set up runtime environment", F, st.FAILURE_CLASS_INFRA),
        ("Complete", "", "", "", F, st.FAILURE_CLASS_INFRA),
        ("Failed", "FAILED", "AppFailed", RAY_FAILED.format(2), F, st.FAILURE_CLASS_USER_CODE),
        ("Failed", "STOPPED", "", "", X, NONE),
        ("Failed", "", "SubmissionFailed", "submitter job failed", F, st.FAILURE_CLASS_INFRA),
        ("Failed", "", "DeadlineExceeded", "", F, st.FAILURE_CLASS_USER_CODE),
        ("Failed", "", "PreRunningDeadlineExceeded", "", F, st.FAILURE_CLASS_INFRA),
        ("Failed", "", "JobDeploymentStatusTransitionGracePeriodExceeded", "", F, st.FAILURE_CLASS_INFRA),
        ("Failed", "", "ValidationFailed", "", F, st.FAILURE_CLASS_INFRA),
        ("ValidationFailed", "", "ValidationFailed", "invalid spec", F, st.FAILURE_CLASS_INFRA),
        ("SomethingNew", "RUNNING", "", "", R, NONE),
        ("SomethingNew", "SUCCEEDED", "", "", S, NONE),
        ("SomethingNew", "", "", "", P, NONE),
    ],
)
def test_mapping(deployment: str, job: str, reason: str, message: str, state: int, failure: int) -> None:
    m = map_status({"jobDeploymentStatus": deployment, "jobStatus": job, "reason": reason, "message": message})
    assert (m.state, m.failure_class) == (state, failure)
    if deployment:
        assert f"jobDeploymentStatus={deployment}" in m.message
    if job:
        assert f"jobStatus={job}" in m.message


def test_no_status_is_pending() -> None:
    assert map_status(None).state == P


def test_exit_code_and_log_tail_from_rays_message() -> None:
    text = RAY_FAILED.format(3) + "\n" + "\n".join(f"line {i}" for i in range(80))
    m = map_status({"jobDeploymentStatus": "Complete", "jobStatus": "FAILED", "message": text})
    assert m.exit_code == 3
    assert len(m.log_tail) == 50
    assert m.log_tail[-1] == "line 79"
    assert "exit code 3" in m.message


def test_succeeded_has_exit_code_zero() -> None:
    assert map_status({"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}).exit_code == 0


def test_times() -> None:
    status = {
        "jobDeploymentStatus": "Complete",
        "jobStatus": "SUCCEEDED",
        "startTime": "2026-11-29T10:00:00Z",
        "endTime": "2026-11-29T10:05:00Z",
        "rayJobInfo": {"startTime": "2026-11-29T10:01:00Z"},
    }
    m = map_status(status)
    assert m.start_time == dt.datetime(2026, 11, 29, 10, 1, tzinfo=dt.UTC)  # the Ray job's own start wins
    assert m.end_time == dt.datetime(2026, 11, 29, 10, 5, tzinfo=dt.UTC)
    running = map_status({"jobDeploymentStatus": "Running", "jobStatus": "RUNNING", "endTime": "2026-11-29T10:05:00Z"})
    assert running.end_time is None


def test_deleting_is_stopped_unless_already_ended() -> None:
    assert map_status({"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}, deleting=True).state == X
    assert map_status({"jobDeploymentStatus": "Initializing"}, deleting=True).state == X
    done = map_status({"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}, deleting=True)
    assert done.state == S


def test_is_active() -> None:
    assert is_active({"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"})
    assert is_active({"jobDeploymentStatus": "Suspended"})
    assert not is_active({"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"})
    assert not is_active({"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}, deleting=True)
