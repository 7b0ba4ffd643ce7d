"""The Slurm executor's backend side: a typed slurmrestd client pinned to one data_parser version.

`client.SlurmClient` talks to slurmrestd (httpx, JWT), `models` holds the typed requests and
answers, `states` maps Slurm states onto the ledger's, `errors` maps failures onto common.errors,
and `api` records the pinned version and why.
"""

from executor_svc.slurm.api import DATA_PARSER
from executor_svc.slurm.client import SlurmClient
from executor_svc.slurm.models import (
    BatchJob,
    JobComponent,
    PingInfo,
    SlurmJob,
    SubmittedJob,
    decode_labels,
    encode_labels,
)
from executor_svc.slurm.states import LedgerState, job_ledger_state, map_state

__all__ = [
    "DATA_PARSER",
    "BatchJob",
    "JobComponent",
    "LedgerState",
    "PingInfo",
    "SlurmClient",
    "SlurmJob",
    "SubmittedJob",
    "decode_labels",
    "encode_labels",
    "job_ledger_state",
    "map_state",
]
