"""Slurm job states -> StarForge ledger states (pure functions, no I/O).

The ledger never stores a backend's raw state (docs/ARCHITECTURE.md, "The contract"); `observe` reports one of PENDING,
RUNNING, SUCCEEDED, FAILED, STOPPED plus, for FAILED, a failure class that decides retries.

- PENDING, and RUNNING while CONFIGURING (nodes still booting) -> PENDING.
- RUNNING, SUSPENDED, and any state while COMPLETING -> RUNNING: a completing job still holds
  its nodes (epilog, step teardown), so it is not finished for StarForge either; cleanup waits.
- COMPLETED -> SUCCEEDED.  CANCELLED -> STOPPED (only StarForge or an operator cancels).
- FAILED / OUT_OF_MEMORY / NODE_FAIL / TIMEOUT / BOOT_FAIL / DEADLINE / PREEMPTED -> FAILED,
  classed OUT_OF_MEMORY, NODE_LOST, PREEMPTED, INFRA (boot failure, a deadline the scheduler
  could not meet, a launch/system failure) or USER_CODE (non-zero exit, signal, time limit).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from starforge_api.job.v1 import job_state_pb2 as st

from executor_svc.plumbing import states
from executor_svc.plumbing.states import LedgerState
from executor_svc.slurm.models import BASE_STATES, SlurmJob

# state_reason values of a FAILED job that mean the platform, not the job, failed.
_INFRA_REASONS = frozenset(
    {"JobLaunchFailure", "SystemFailure", "NodeDown", "PartitionDown", "BurstBufferOperationFailure", "Prolog"}
)
# Slurm base state -> ledger state, once the flags said the job is neither COMPLETING nor CONFIGURING.
SLURM_STATES: dict[str, LedgerState] = {
    "PENDING": states.PENDING,
    "RUNNING": states.RUNNING,
    "SUSPENDED": states.RUNNING,
    "COMPLETED": states.SUCCEEDED,
    "CANCELLED": states.STOPPED,  # only StarForge or an operator cancels
    "FAILED": states.failed(st.FAILURE_CLASS_USER_CODE),  # INFRA by reason or flag, see map_state
    "OUT_OF_MEMORY": states.failed(st.FAILURE_CLASS_OUT_OF_MEMORY),
    "NODE_FAIL": states.failed(st.FAILURE_CLASS_NODE_LOST),
    "PREEMPTED": states.failed(st.FAILURE_CLASS_PREEMPTED),
    "BOOT_FAIL": states.failed(st.FAILURE_CLASS_INFRA),
    "DEADLINE": states.failed(st.FAILURE_CLASS_INFRA),
    "TIMEOUT": states.failed(st.FAILURE_CLASS_USER_CODE),
}


def _describe(base: str, flags: Sequence[str], reason: str, exit_code: int | None, signal: int | None) -> str:
    text = "Slurm state " + "+".join([base, *flags])
    if reason and reason != "None":
        text += f" ({reason})"
    if signal:
        text += f", killed by signal {signal}"
    elif exit_code is not None and base != "PENDING":
        text += f", exit code {exit_code}"
    return text


def map_state(
    base: str,
    flags: Sequence[str] = (),
    *,
    reason: str = "",
    exit_code: int | None = None,
    signal: int | None = None,
) -> LedgerState:
    """The ledger state of one Slurm job record. ValueError for a base state Slurm does not define."""
    if base not in BASE_STATES:
        raise ValueError(f"unknown Slurm base state {base!r} (flags {list(flags)})")
    message = _describe(base, flags, reason, exit_code, signal)
    if "COMPLETING" in flags and base != "PENDING":
        return LedgerState(st.JOB_STATE_RUNNING, message=message)
    if base == "RUNNING" and "CONFIGURING" in flags:
        return LedgerState(st.JOB_STATE_PENDING, message=message)
    if base == "FAILED" and ("LAUNCH_FAILED" in flags or reason in _INFRA_REASONS):
        return LedgerState(st.JOB_STATE_FAILED, st.FAILURE_CLASS_INFRA, message)
    return dataclasses.replace(states.look_up(SLURM_STATES, base, "Slurm base state"), message=message)


def job_ledger_state(job: SlurmJob) -> LedgerState:
    """The ledger state of a job; a heterogeneous job combines its components.

    A heterogeneous job is active while any component is (RUNNING wins over PENDING); once all
    ended it FAILED if any component failed (that component's class), else STOPPED if any was
    cancelled, else SUCCEEDED.
    """
    parts = job.components or (job,)
    mapped = [
        map_state(
            part.state, part.state_flags, reason=part.state_reason, exit_code=part.exit_code, signal=part.exit_signal
        )
        for part in parts
    ]
    if len(mapped) == 1:
        return mapped[0]
    prefix = f"heterogeneous job {job.job_id}: "
    order = (st.JOB_STATE_RUNNING, st.JOB_STATE_PENDING, st.JOB_STATE_FAILED, st.JOB_STATE_STOPPED)
    for wanted in order:
        for part, state in zip(parts, mapped, strict=True):
            if state.state == wanted:
                return LedgerState(
                    state.state, state.failure_class, f"{prefix}component {part.job_id}: {state.message}"
                )
    return LedgerState(st.JOB_STATE_SUCCEEDED, message=prefix + "every component completed")
