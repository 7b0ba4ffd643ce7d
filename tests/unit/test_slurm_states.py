"""Slurm state -> ledger state mapping (pure; no cluster needed, so not marked `slurm`)."""

from __future__ import annotations

import dataclasses

import pytest
from starforge_api.job.v1 import job_state_pb2 as st

from executor_svc.slurm import decode_labels, encode_labels, job_ledger_state, map_state
from executor_svc.slurm.models import SlurmJob, split_state


@pytest.mark.parametrize(
    ("base", "flags", "state", "failure_class"),
    [
        ("PENDING", (), st.JOB_STATE_PENDING, st.FAILURE_CLASS_UNSPECIFIED),
        ("PENDING", ("REQUEUED",), st.JOB_STATE_PENDING, st.FAILURE_CLASS_UNSPECIFIED),
        ("RUNNING", ("CONFIGURING",), st.JOB_STATE_PENDING, st.FAILURE_CLASS_UNSPECIFIED),
        ("RUNNING", (), st.JOB_STATE_RUNNING, st.FAILURE_CLASS_UNSPECIFIED),
        ("SUSPENDED", (), st.JOB_STATE_RUNNING, st.FAILURE_CLASS_UNSPECIFIED),
        ("COMPLETED", ("COMPLETING",), st.JOB_STATE_RUNNING, st.FAILURE_CLASS_UNSPECIFIED),
        ("CANCELLED", ("COMPLETING",), st.JOB_STATE_RUNNING, st.FAILURE_CLASS_UNSPECIFIED),
        ("COMPLETED", (), st.JOB_STATE_SUCCEEDED, st.FAILURE_CLASS_UNSPECIFIED),
        ("CANCELLED", (), st.JOB_STATE_STOPPED, st.FAILURE_CLASS_UNSPECIFIED),
        ("FAILED", (), st.JOB_STATE_FAILED, st.FAILURE_CLASS_USER_CODE),
        ("FAILED", ("LAUNCH_FAILED",), st.JOB_STATE_FAILED, st.FAILURE_CLASS_INFRA),
        ("OUT_OF_MEMORY", (), st.JOB_STATE_FAILED, st.FAILURE_CLASS_OUT_OF_MEMORY),
        ("NODE_FAIL", (), st.JOB_STATE_FAILED, st.FAILURE_CLASS_NODE_LOST),
        ("PREEMPTED", (), st.JOB_STATE_FAILED, st.FAILURE_CLASS_PREEMPTED),
        ("TIMEOUT", (), st.JOB_STATE_FAILED, st.FAILURE_CLASS_USER_CODE),
        ("BOOT_FAIL", (), st.JOB_STATE_FAILED, st.FAILURE_CLASS_INFRA),
        ("DEADLINE", (), st.JOB_STATE_FAILED, st.FAILURE_CLASS_INFRA),
    ],
)
def test_map_state(base: str, flags: tuple[str, ...], state: int, failure_class: int) -> None:
    mapped = map_state(base, flags)
    assert (mapped.state, mapped.failure_class) == (state, failure_class)
    assert mapped.message.startswith("Slurm state " + base)


def test_failed_for_a_platform_reason_is_infra() -> None:
    mapped = map_state("FAILED", reason="JobLaunchFailure", exit_code=1)
    assert mapped.failure_class == st.FAILURE_CLASS_INFRA
    assert mapped.message == "Slurm state FAILED (JobLaunchFailure), exit code 1"


def test_unknown_state_is_an_error_not_a_guess() -> None:
    with pytest.raises(ValueError, match="unknown Slurm base state"):
        map_state("EXPLODED")
    with pytest.raises(ValueError, match="exactly one base state"):
        split_state(["COMPLETING"])
    assert split_state(["RUNNING", "COMPLETING"]) == ("RUNNING", ("COMPLETING",))


def _job(job_id: int, state: str, offset: int, exit_code: int | None = None) -> SlurmJob:
    return SlurmJob(
        job_id=job_id,
        name="het",
        state=state,
        state_flags=(),
        state_reason="",
        exit_code=exit_code,
        exit_signal=None,
        nodes=f"n{offset + 1}",
        partition="main",
        user_name="starforge",
        comment="",
        labels={},
        submit_time=None,
        start_time=None,
        end_time=None,
        het_job_id=10,
        het_job_offset=offset,
        working_directory="/",
        standard_output="",
        standard_error="",
    )


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        ("RUNNING", "COMPLETED", st.JOB_STATE_RUNNING),
        ("PENDING", "PENDING", st.JOB_STATE_PENDING),
        ("COMPLETED", "FAILED", st.JOB_STATE_FAILED),
        ("CANCELLED", "COMPLETED", st.JOB_STATE_STOPPED),
        ("COMPLETED", "COMPLETED", st.JOB_STATE_SUCCEEDED),
    ],
)
def test_heterogeneous_job_combines_components(first: str, second: str, expected: int) -> None:
    leader = _job(10, first, 0)
    job = dataclasses.replace(leader, components=(leader, _job(11, second, 1, exit_code=2)))
    assert job_ledger_state(job).state == expected


def test_labels_round_trip_and_foreign_comments_are_ignored() -> None:
    labels = {"starforge.dev/attempt-id": "jabc.1", "team": "rl"}
    assert decode_labels(encode_labels(labels)) == labels
    assert encode_labels(labels) == encode_labels(dict(reversed(labels.items())))
    assert decode_labels("nightly run") == {}
    assert decode_labels("starforge:[1]") == {}
    assert decode_labels("starforge:{broken") == {}
