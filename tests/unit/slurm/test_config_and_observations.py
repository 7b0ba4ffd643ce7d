"""Slurm executor config checks, outcome markers, observation mapping, token parsing (pure)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import pathlib
from typing import Any

import pytest
from starforge_api.job.v1 import job_state_pb2 as st

from common.config import ConfigError, build_dataclass
from executor_svc.slurm.config import SlurmConfig
from executor_svc.slurm.models import SlurmJob
from executor_svc.slurm.observations import from_marker, from_slurm
from executor_svc.slurm.plan import pyxis_image
from executor_svc.slurm.staging import AttemptRecord, Outcome, read_log_tail, read_outcome
from executor_svc.slurm.tokens import parse_token

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def config(**section: Any) -> SlurmConfig:
    base = {"staging_dir": "/shared/staging", "out_dir": "/shared/out", "token": "t", "user": "u"}
    return build_dataclass(SlurmConfig, base | section, "slurm")


def test_runtime_names_follow_the_container_runtime() -> None:
    assert config().runtime_name == "host"
    assert config(container_runtime="pyxis").runtime_name == "enroot"
    assert config(container_runtime="apptainer").runtime_name == "apptainer"
    assert config().blob_cache == pathlib.Path("/shared/staging/.blobs")


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"container_runtime": "docker"}, "container_runtime: 'docker'"),
        ({"ray": {"node_ip": "eth0"}}, "ray.node_ip"),
        ({"staging_dir": "relative/dir"}, "must be an absolute path"),
        ({"job_uid": 64101}, "set together"),
        ({"job_fields": {"script": "x"}}, "set by the executor itself"),
        ({"inventory": []}, "list at least one series"),
        ({"inventory": [{"series": "h100"}, {"series": "h100"}]}, "listed twice"),
        ({"inventory": [{"series": "h100", "gres_type": "h 100"}]}, "gres_type"),
        ({"inventory": [{"series": "h100", "nodes": 0}]}, "nodes must be at least 1"),
        ({"unknown_key": 1}, "unknown key"),
    ],
)
def test_bad_sections_are_refused_when_loaded(section: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config(**section)


def test_gres_strings() -> None:
    cfg = config(
        inventory=[{"series": "h100", "gpus_per_node": 8, "gres_type": "h100"}, {"series": "a", "gpus_per_node": 2}]
    )
    h100, plain = cfg.inventory
    assert (h100.gres(2), h100.gres(0), plain.gres(2)) == ("gpu:h100:2", "", "gpu:2")


def test_pyxis_image_names() -> None:
    assert pyxis_image("registry.local/train:v1") == "registry.local#train:v1"
    assert pyxis_image("localhost:5000/a/b:1") == "localhost:5000#a/b:1"
    assert pyxis_image("ubuntu:24.04") == "ubuntu:24.04"
    assert pyxis_image("nvidia/cuda:12") == "nvidia/cuda:12"
    assert pyxis_image("/images/x.sqsh") == "/images/x.sqsh"
    assert pyxis_image("nvcr.io#nvidia/pytorch") == "nvcr.io#nvidia/pytorch"


def test_token_output_of_scontrol_or_bare() -> None:
    assert parse_token("SLURM_JWT=abc.def.ghi\n") == "abc.def.ghi"
    assert parse_token("  abc.def.ghi \n") == "abc.def.ghi"


def test_outcome_marker_and_log_tail(tmp_path: pathlib.Path) -> None:
    (tmp_path / "outcome").write_text("exit_code=3\nsignal=\nended_at=1767225600\nphase=capsule\n")
    assert read_outcome(tmp_path / "outcome") == Outcome(3, "", T0, "capsule")
    assert read_outcome(tmp_path / "missing") is None
    (tmp_path / "garbled").write_text("exit_code=\n")
    assert read_outcome(tmp_path / "garbled") is None
    (tmp_path / "job.log").write_text("".join(f"line {i}\n" for i in range(200)))
    assert read_log_tail(tmp_path / "job.log") == [f"line {i}" for i in range(150, 200)]
    assert read_log_tail(tmp_path / "none.log") == []


def job(state: str, exit_code: int | None = None, signal: int | None = None) -> SlurmJob:
    return SlurmJob(
        job_id=42,
        name="sf-jabc.1",
        state=state,
        state_flags=(),
        state_reason="",
        exit_code=exit_code,
        exit_signal=signal,
        nodes="n1",
        partition="main",
        user_name="starforge",
        comment="",
        labels={},
        submit_time=T0,
        start_time=T0,
        end_time=T0 + dt.timedelta(seconds=5),
        het_job_id=None,
        het_job_offset=None,
        working_directory="/",
        standard_output="",
        standard_error="",
    )


@pytest.mark.parametrize(
    ("slurm", "tail", "state", "code", "failure"),
    [
        (job("RUNNING"), [], st.JOB_STATE_RUNNING, None, st.FAILURE_CLASS_UNSPECIFIED),
        (job("COMPLETED", 0), [], st.JOB_STATE_SUCCEEDED, 0, st.FAILURE_CLASS_UNSPECIFIED),
        (job("FAILED", 3), [], st.JOB_STATE_FAILED, 3, st.FAILURE_CLASS_USER_CODE),
        (job("FAILED", 97), [], st.JOB_STATE_FAILED, 97, st.FAILURE_CLASS_PRECHECK),
        (job("FAILED", 98), [], st.JOB_STATE_FAILED, 98, st.FAILURE_CLASS_IMAGE),
        (job("FAILED", 96), [], st.JOB_STATE_FAILED, 96, st.FAILURE_CLASS_INFRA),
        (job("FAILED", 1), ["pyxis: failed to import docker image"], st.JOB_STATE_FAILED, 1, st.FAILURE_CLASS_IMAGE),
        (job("CANCELLED", 0, 15), [], st.JOB_STATE_STOPPED, 143, st.FAILURE_CLASS_UNSPECIFIED),
        (job("NODE_FAIL", 0), [], st.JOB_STATE_FAILED, 0, st.FAILURE_CLASS_NODE_LOST),
        (job("OUT_OF_MEMORY", 0, 9), [], st.JOB_STATE_FAILED, 137, st.FAILURE_CLASS_OUT_OF_MEMORY),
    ],
)
def test_from_slurm(slurm: SlurmJob, tail: list[str], state: int, code: int | None, failure: int) -> None:
    obs = from_slurm("jabc.1", slurm, tail)
    assert (obs.state, obs.exit_code, obs.failure_class) == (state, code, failure), obs
    assert obs.backend_handle == "42" and obs.node == "n1"
    assert (obs.end_time is None) == (state == st.JOB_STATE_RUNNING)


def test_any_end_after_a_stop_starforge_asked_for_is_stopped() -> None:
    for ended in (job("FAILED", 143), job("COMPLETED", 0), job("CANCELLED", 0, 15)):
        obs = from_slurm("jabc.1", ended, [], stop_requested=True)
        assert (obs.state, obs.failure_class) == (st.JOB_STATE_STOPPED, st.FAILURE_CLASS_UNSPECIFIED), obs
        assert obs.message.endswith("stopped by StarForge")
    running = from_slurm("jabc.1", job("RUNNING"), [], stop_requested=True)
    assert running.state == st.JOB_STATE_RUNNING


RECORD = AttemptRecord("jabc.1", "jabc", 1, 42, "/shared/out/jabc", created_at=0.0)


@pytest.mark.parametrize(
    ("stop", "outcome", "state", "code", "failure"),
    [
        (False, Outcome(0, "", T0, "capsule"), st.JOB_STATE_SUCCEEDED, 0, st.FAILURE_CLASS_UNSPECIFIED),
        (False, Outcome(3, "", T0, "capsule"), st.JOB_STATE_FAILED, 3, st.FAILURE_CLASS_USER_CODE),
        (False, Outcome(97, "", T0, "capsule"), st.JOB_STATE_FAILED, 97, st.FAILURE_CLASS_PRECHECK),
        (False, Outcome(96, "", T0, "ray"), st.JOB_STATE_FAILED, 96, st.FAILURE_CLASS_INFRA),
        (True, Outcome(143, "TERM", T0, "capsule"), st.JOB_STATE_STOPPED, 143, st.FAILURE_CLASS_UNSPECIFIED),
        (True, None, st.JOB_STATE_STOPPED, None, st.FAILURE_CLASS_UNSPECIFIED),
        (False, Outcome(143, "TERM", T0, "capsule"), st.JOB_STATE_STOPPED, 143, st.FAILURE_CLASS_UNSPECIFIED),
        (False, None, st.JOB_STATE_FAILED, None, st.FAILURE_CLASS_INFRA),
    ],
)
def test_from_marker_after_slurm_forgot(
    stop: bool, outcome: Outcome | None, state: int, code: int | None, failure: int
) -> None:
    record = dataclasses.replace(RECORD, stop_requested_at=T0.timestamp() if stop else None)
    obs = from_marker(record, outcome, T0, ["last words"])
    assert (obs.state, obs.exit_code, obs.failure_class) == (state, code, failure), obs
    assert "no longer known to slurmctld" in obs.message
    assert obs.log_tail == ("last words",)
    assert obs.start_time == T0
