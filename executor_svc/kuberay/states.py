"""RayJob status -> StarForge ledger state (pure functions, no I/O).

KubeRay reports two fields: `jobDeploymentStatus` (the RayJob's own lifecycle: cluster, submitter)
and `jobStatus` (the Ray job, i.e. the capsule's entrypoint, as Ray's job manager sees it). The
ledger never stores either (docs/ARCHITECTURE.md, "The contract"); observe reports one of PENDING, RUNNING, SUCCEEDED,
FAILED, STOPPED and keeps KubeRay's words in the message.

jobDeploymentStatus (KubeRay v1):
- "" (new, not reconciled yet), Initializing (RayCluster coming up: scheduling, image pull, the
  capsule fetch in the init containers), Waiting (InteractiveMode only), Retrying (backoffLimit;
  StarForge sets 0), Scheduling/Scheduled (cron RayJobs) -> PENDING.
- Suspending / Suspended (spec.suspend, e.g. Kueue waiting to admit or having preempted it: no
  pods, KubeRay starts a fresh cluster on resume) -> PENDING, with that said in the message.
- Running -> by jobStatus: "" / PENDING (submitted, entrypoint not started) -> PENDING;
  RUNNING -> RUNNING; a terminal jobStatus (KubeRay has not caught up) -> as under Complete.
- Complete -> by jobStatus: SUCCEEDED -> SUCCEEDED; STOPPED -> STOPPED; FAILED -> FAILED (classed
  below); none -> FAILED/INFRA.
- Failed -> by `reason`: AppFailed (or jobStatus FAILED) -> FAILED classed below; jobStatus
  STOPPED -> STOPPED; DeadlineExceeded (activeDeadlineSeconds, a time limit) -> FAILED/USER_CODE;
  SubmissionFailed, PreRunningDeadlineExceeded (never got running: capacity, image, fetch),
  JobDeploymentStatusTransitionGracePeriodExceeded, ValidationFailed, anything else -> FAILED/INFRA.
- ValidationFailed (KubeRay refused the spec) -> FAILED/INFRA.
- any other value (a newer KubeRay) -> by jobStatus alone, the message naming the unknown value.

A RayJob with metadata.deletionTimestamp (a stop in progress: Foreground deletion waits for the
pods) is STOPPED, unless it had already ended, in which case it keeps that outcome.

Failed Ray jobs are classed from Ray's message ("Job entrypoint command failed with exit code N,
last available logs ...", copied by KubeRay into status.message): exit 97/98 (bootstrap's integrity
/ no-Python codes) -> PRECHECK; out-of-memory evidence -> OUT_OF_MEMORY; another exit code ->
USER_CODE; no exit code but a dead node -> NODE_LOST; otherwise INFRA (retryable: Ray itself
failed, e.g. its runtime environment).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starforge_api.job.v1 import job_state_pb2 as st

from executor_svc.plumbing import states
from executor_svc.plumbing.failures import OOM_EVIDENCE, PRECHECK_EXIT_CODES
from executor_svc.plumbing.states import LedgerState

PENDING_DEPLOYMENT = {
    "": "not reconciled by the KubeRay operator yet",
    "Initializing": "the Ray cluster is starting (scheduling, image pull, capsule fetch)",
    "Waiting": "waiting for a job submission",
    "Retrying": "KubeRay is retrying with a new Ray cluster",
    "Scheduling": "waiting for its schedule",
    "Scheduled": "scheduled",
    "Suspending": "being suspended: its Ray cluster is being deleted",
    "Suspended": "suspended (no pods); KubeRay starts a new Ray cluster when it is resumed",
}
# A terminal jobStatus (Ray's view of the entrypoint) -> ledger state; FAILED is classed from
# Ray's message (_classify).
RAY_JOB_STATES: dict[str, LedgerState] = {
    "SUCCEEDED": states.SUCCEEDED,
    "STOPPED": states.STOPPED,
    "FAILED": states.failed(st.FAILURE_CLASS_INFRA),
}
TERMINAL_JOB = tuple(RAY_JOB_STATES)
NODE_LOST_EVIDENCE = ("node has died", "node died", "NodeDiedError", "was lost")
_EXIT_CODE = re.compile(r"exit code (-?[0-9]+)")
MAX_TAIL = 50


@dataclass(frozen=True)
class Mapped:
    """What observe reports for one RayJob."""

    state: int
    failure_class: int = st.FAILURE_CLASS_UNSPECIFIED
    message: str = ""
    exit_code: int | None = None
    log_tail: tuple[str, ...] = ()
    start_time: dt.datetime | None = None
    end_time: dt.datetime | None = None


def parse_time(value: object) -> dt.datetime | None:
    """An RFC 3339 timestamp of the API ("2026-11-29T10:00:00Z") as an aware datetime."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _classify(text: str) -> tuple[int, int | None]:
    """(failure class, exit code) of a failed Ray job from Ray's message."""
    m = _EXIT_CODE.search(text)
    code = int(m.group(1)) if m else None
    if any(e in text for e in OOM_EVIDENCE):
        return st.FAILURE_CLASS_OUT_OF_MEMORY, code
    if code in PRECHECK_EXIT_CODES:
        return st.FAILURE_CLASS_PRECHECK, code
    if code is not None:
        return st.FAILURE_CLASS_USER_CODE, code
    if any(e in text for e in NODE_LOST_EVIDENCE):
        return st.FAILURE_CLASS_NODE_LOST, None
    return st.FAILURE_CLASS_INFRA, None


def _by_job_status(job: str, text: str) -> tuple[int, int, int | None]:
    """(state, failure class, exit code) for a terminal jobStatus."""
    entry = states.look_up(RAY_JOB_STATES, job, "terminal Ray job status")
    if entry.state == st.JOB_STATE_SUCCEEDED:
        return entry.state, entry.failure_class, 0
    if entry.state == st.JOB_STATE_FAILED:
        failure, code = _classify(text)
        return entry.state, failure, code
    return entry.state, entry.failure_class, None


def _failed(reason: str, job: str, text: str) -> tuple[int, int, int | None]:
    if job == "STOPPED":
        return st.JOB_STATE_STOPPED, st.FAILURE_CLASS_UNSPECIFIED, None
    if reason == "AppFailed" or job == "FAILED":
        return _by_job_status("FAILED", text)
    if reason == "DeadlineExceeded":
        return st.JOB_STATE_FAILED, st.FAILURE_CLASS_USER_CODE, None
    return st.JOB_STATE_FAILED, st.FAILURE_CLASS_INFRA, None


def map_status(status: Mapping[str, Any] | None, *, deleting: bool = False) -> Mapped:
    """The ledger's view of a RayJob's `status` (None: no status written yet)."""
    status = status or {}
    deployment = str(status.get("jobDeploymentStatus") or "")
    job = str(status.get("jobStatus") or "")
    reason = str(status.get("reason") or "")
    text = str(status.get("message") or "")
    lines = [line for line in text.splitlines() if line.strip()]
    exit_code: int | None = None
    state: int = st.JOB_STATE_PENDING
    failure: int = st.FAILURE_CLASS_UNSPECIFIED
    note = ""
    if deployment in PENDING_DEPLOYMENT:
        state, note = st.JOB_STATE_PENDING, PENDING_DEPLOYMENT[deployment]
    elif deployment == "Running" or deployment not in ("Complete", "Failed", "ValidationFailed"):
        if job in TERMINAL_JOB:
            state, failure, exit_code = _by_job_status(job, text)
        else:
            state = st.JOB_STATE_RUNNING if job == "RUNNING" else st.JOB_STATE_PENDING
        if deployment != "Running":
            note = f"unknown KubeRay deployment status {deployment!r}; mapped by the job status"
    elif deployment == "Complete":
        if job in TERMINAL_JOB:
            state, failure, exit_code = _by_job_status(job, text)
        else:
            state, failure, note = st.JOB_STATE_FAILED, st.FAILURE_CLASS_INFRA, "complete without a Ray job status"
    elif deployment == "Failed":
        state, failure, exit_code = _failed(reason, job, text)
    else:  # ValidationFailed
        state, failure = st.JOB_STATE_FAILED, st.FAILURE_CLASS_INFRA
    terminal = state in (st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, st.JOB_STATE_STOPPED)
    if deleting and not terminal:
        state, failure, note = st.JOB_STATE_STOPPED, st.FAILURE_CLASS_UNSPECIFIED, "deleted (stop): pods terminating"
        terminal = True
    words = [f"jobDeploymentStatus={deployment or '(new)'}"]
    if job:
        words.append(f"jobStatus={job}")
    if reason:
        words.append(f"reason={reason}")
    message = " ".join(words)
    if note:
        message += f" ({note})"
    if lines:
        message += ": " + lines[0][:500]
    raw_info = status.get("rayJobInfo")
    info: Mapping[str, Any] = raw_info if isinstance(raw_info, Mapping) else {}
    start = parse_time(info.get("startTime")) or parse_time(status.get("startTime"))
    end = (parse_time(info.get("endTime")) or parse_time(status.get("endTime"))) if terminal else None
    return Mapped(
        state=state,
        failure_class=failure,
        message=message,
        exit_code=exit_code,
        log_tail=tuple(line[:1000] for line in lines[1:][-MAX_TAIL:]),
        start_time=start,
        end_time=end,
    )


def is_active(status: Mapping[str, Any] | None, *, deleting: bool = False) -> bool:
    """True while the attempt may hold pods and run code (not ended, not being deleted)."""
    return map_status(status, deleting=deleting).state in (st.JOB_STATE_PENDING, st.JOB_STATE_RUNNING)
