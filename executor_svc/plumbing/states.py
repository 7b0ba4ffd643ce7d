"""A backend's states -> the ledger's, in one style for every kind.

Each kind reduces what its backend reports to one key (Slurm's base state, a RayJob's jobStatus,
the local runtime's phase) after its own overrides (a Slurm job still COMPLETING runs on; a RayJob
being deleted is stopping), and looks the key up in its table of `LedgerState`s. A FAILED entry
carries the failure class the key alone decides; a kind may refine it from evidence (an exit
code, a log line). A key the table lacks is an error, never a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from starforge_api.job.v1 import job_state_pb2 as st


@dataclass(frozen=True)
class LedgerState:
    """A ledger JobState value, its failure class (FAILED only) and a one-line explanation."""

    state: int
    failure_class: int = st.FAILURE_CLASS_UNSPECIFIED
    message: str = ""


PENDING = LedgerState(st.JOB_STATE_PENDING)
RUNNING = LedgerState(st.JOB_STATE_RUNNING)
SUCCEEDED = LedgerState(st.JOB_STATE_SUCCEEDED)
STOPPED = LedgerState(st.JOB_STATE_STOPPED)


def failed(failure_class: int) -> LedgerState:
    return LedgerState(st.JOB_STATE_FAILED, failure_class)


def look_up(table: Mapping[str, LedgerState], key: str, what: str) -> LedgerState:
    """The table's entry for `key`; ValueError naming `what` for a key it does not define."""
    try:
        return table[key]
    except KeyError:
        raise ValueError(f"unknown {what} {key!r}") from None
