"""`sf job status` into a pipe: every field of the rich panel, as plain lines, without rich."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console
from starforge_api.job.v1 import job_pb2, job_spec_pb2
from starforge_api.job.v1 import job_state_pb2 as js

from cli import jobtext, render


def _job() -> job_pb2.Job:
    """A job with every field the panel shows (timestamps unset: they print as "-" or not at all)."""
    j = job_pb2.Job(
        job_id="j0abc",
        state=js.JOB_STATE_FAILED,
        owner="alice",
        project="@alice/lab",
        experiment="exp",
        stage="sft",
        parent_job_id="j0parent",
        method="custom/custom",
        image="host",
        image_source=job_pb2.IMAGE_SOURCE_HOST_RUNTIME,
        image_source_detail="fleet local declares it",
        framework_version="1.15.0",
        runtime_id="trl-1.15.0",
        fleet="local",
        retry_budget=2,
        retries_used=1,
        out_dir="/out/j0abc",
        warnings=["first warning", "second [warning]"],
    )
    j.pools.add(series="h200", nodes=2, gpus_per_node=8, profile="h200:16")
    j.spec.observability.mode = job_spec_pb2.OBSERVABILITY_MODE_EXTERNAL
    j.spec.observability.url = "http://wandb.example.internal"
    j.spec.observability.tool = "wandb"
    j.attempts.add(
        number=1,
        state=js.JOB_STATE_FAILED,
        cause=job_pb2.ATTEMPT_CAUSE_INITIAL,
        fleet="local",
        executor_kind="process",
        backend_handle="pid:41",
        node="n1",
        exit_code=3,
        reason="exited 3",
    )
    j.attempts.add(number=2, state=js.JOB_STATE_RUNNING, fleet="local")
    d = j.diagnosis
    d.failure_class = js.FAILURE_CLASS_USER_CODE
    d.summary = "train.sh exited 3"
    d.hint = "see the log\nthen fix train.sh"
    d.retryable = True
    d.log_tail.extend(["line one", "line two"])
    p = j.provenance
    p.git_commit, p.git_dirty, p.git_branch = "0123456789abcdef", True, "main"
    p.untracked_files.extend(f"f{i}.py" for i in range(7))
    p.config_snapshot = "a: 1"
    p.recipe_digest = "sha256:" + "ab" * 32
    p.client_version, p.client_host = "0.1", "host1"
    return j


EXPECTED = """\
job j0abc  FAILED
state       FAILED
owner       alice
project     @alice/lab
experiment  exp (stage sft of j0parent)
method      custom/custom
pools       main: h200 2x8 GPU (h200:16)
image       host (no container: the fleet's own environment)
image from  host runtime: fleet local declares it
framework   1.15.0 (runtime trl-1.15.0)
fleet       local
tracker     http://wandb.example.internal (wandb)
created     -
exit        exit code 3
retries     1 of 2 used
out dir     /out/j0abc
warning     first warning
warning     second [warning]

diagnosis
class    user code
summary  train.sh exited 3
hint     see the log
         then fix train.sh
retry    retried automatically
last log lines:
  line one
  line two

attempts
#  STATE    CAUSE        FLEET            HANDLE  NODE  EXIT  REASON
1  FAILED   initial      local (process)  pid:41  n1    3     exited 3
2  RUNNING  unspecified  local            -       -     -

provenance
git        0123456789ab (dirty) on main
untracked  7 file(s) not packed: f0.py, f1.py, f2.py, f3.py, f4.py ...
config     16c3c6d78678d53d
recipe     abababababababab
runner     -
capsule    -
image      -
client     sf 0.1 host1
"""


def _plain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    for var in ("FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(var, raising=False)


def test_every_field_is_a_plain_line(monkeypatch: pytest.MonkeyPatch) -> None:
    _plain(monkeypatch)
    text = jobtext.status_text(_job())
    assert text is not None
    assert text == EXPECTED


def test_the_plain_lines_hold_what_the_panel_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Word for word, the panel (rich, a terminal's) and the plain lines say the same."""
    _plain(monkeypatch)
    text = jobtext.status_text(_job())
    assert text is not None
    buffer = io.StringIO()
    Console(file=buffer, width=200, highlight=False, force_terminal=False).print(render.job_panel(_job()))
    panel = re.sub(r"[│╭╮╰╯─]", " ", buffer.getvalue())
    assert panel.split() == text.split()


def test_a_terminal_or_text_that_is_not_printable_ascii_goes_to_rich(monkeypatch: pytest.MonkeyPatch) -> None:
    _plain(monkeypatch)
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert jobtext.status_text(_job()) is None
    monkeypatch.delenv("FORCE_COLOR")
    for change in (
        lambda j: j.warnings.append("caf\u00e9"),
        lambda j: j.diagnosis.log_tail.append("\x1b[31mred"),
        lambda j: j.attempts.add(number=3, reason="tab\there"),
        lambda j: setattr(j.provenance, "client_host", "h\u00f6st"),
    ):
        job = _job()
        change(job)
        assert jobtext.status_text(job) is None


def test_a_bare_job_has_its_title_state_and_creation(monkeypatch: pytest.MonkeyPatch) -> None:
    _plain(monkeypatch)
    job = job_pb2.Job(job_id="j0x", state=js.JOB_STATE_QUEUED)
    assert jobtext.status_text(job) == "job j0x  QUEUED\nstate    QUEUED\ncreated  -\n"
