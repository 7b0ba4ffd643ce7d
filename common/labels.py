"""Label names every backend object of an attempt carries (docs/ARCHITECTURE.md, Identifiers).

Shared by the control plane (which puts the ids into a LaunchRequest's labels) and every executor
kind (which puts them on containers, Slurm jobs and RayJobs and finds their objects by them), so
that neither layer imports the other's package.
"""

from __future__ import annotations

LABEL_JOB = "starforge.dev/job-id"
LABEL_ATTEMPT = "starforge.dev/attempt-id"
LABEL_MANAGED = "starforge.dev/managed-by"
MANAGED_BY = "starforge"
