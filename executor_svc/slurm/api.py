"""The one slurmrestd API version this client speaks, and why.

slurmrestd serves several OpenAPI "data_parser" versions side by side, each under its own path
prefix (`/slurm/v0.0.NN/...`), and each version changes field shapes (v0.0.40 turned `job_state`
into a list, numbers into `{set, infinite, number}` structs, ...). A client that probes and adapts
to whatever the server offers multiplies those shapes; so the client is pinned to ONE version.

`DATA_PARSER = "v0.0.42"`, because:
- Slurm 24.11 (Debian 13's slurmrestd 24.11.5, our test cluster) serves exactly v0.0.40, v0.0.41
  and v0.0.42 (checked in its `GET /openapi/v3`); Slurm 22.05 (Debian 12) serves only v0.0.38 and
  is not supported.
- v0.0.42 is the newest of those. Slurm removes the oldest data_parser as new releases add
  versions, and SchedMD's REST release notes advise clients to use the highest version available
  "to avoid needing to port clients sooner than would be otherwise required". v0.0.42 is also
  served by 25.05 and 25.11, so the same client works across the current releases.
- Everything StarForge needs exists in it: `job/submit` with `job` or `jobs` (heterogeneous),
  `tres_per_node` for GPUs, `comment` for labels, `job_state` as a list, and `DELETE /job/{id}`
  that reports "already done" / "invalid job id" per job instead of failing the request.

Moving to a newer version is a deliberate change of this constant plus the parsing in `models.py`,
checked against the real cluster by tests/integration/slurm.
"""

from __future__ import annotations

DATA_PARSER = "v0.0.42"
PREFIX = f"/slurm/{DATA_PARSER}"
# What slurmrestd reports in `meta.plugin.data_parser` for the pinned version.
DATA_PARSER_PLUGIN = f"data_parser/{DATA_PARSER}"

USER_HEADER = "X-SLURM-USER-NAME"
TOKEN_HEADER = "X-SLURM-USER-TOKEN"  # noqa: S105 - a header name, not a secret

# Slurm error numbers (slurm_errno.h) the client treats specially.
ERR_PROTOCOL_AUTHENTICATION = 1007
ERR_ACCESS_DENIED = 2002
ERR_INVALID_JOB_ID = 2017
ERR_ALREADY_DONE = 2021
