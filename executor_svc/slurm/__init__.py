"""The `slurm` executor kind: attempts as Slurm batch jobs through slurmrestd.

`executor.SlurmExecutor` is the kind (`KIND`, registered in executor_svc.registry); `config` its
`slurm:` section; `plan` what a request becomes; `script` the batch script builder; `staging`
the files on the shared file system; `observations` the mapping onto the ledger; `tokens` the
JWT. The backend side: `client.SlurmClient` talks to slurmrestd (httpx, JWT), `models` holds the
typed requests and answers, `states` maps Slurm states onto the ledger's, `errors` maps failures
onto common.errors, and `api` records the pinned data_parser version and why.
"""

from typing import Any

from executor_svc.base import Executor
from executor_svc.plumbing.states import LedgerState
from executor_svc.registry import ExecutorKind
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
from executor_svc.slurm.states import job_ledger_state, map_state

from executor_svc.slurm.config import SlurmConfig  # isort: skip - after the client modules it uses
from executor_svc.slurm.executor import SlurmExecutor  # isort: skip


async def _create(cfg: Any) -> Executor:
    return await SlurmExecutor.create(cfg)


KIND = ExecutorKind(name="slurm", config_class=SlurmConfig, create=_create)

__all__ = [
    "DATA_PARSER",
    "KIND",
    "BatchJob",
    "JobComponent",
    "LedgerState",
    "PingInfo",
    "SlurmClient",
    "SlurmConfig",
    "SlurmExecutor",
    "SlurmJob",
    "SubmittedJob",
    "decode_labels",
    "encode_labels",
    "job_ledger_state",
    "map_state",
]
