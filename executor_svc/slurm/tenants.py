"""Which Unix user an attempt runs as: the owner's entry in `slurm.tenants`, else the policy.

Pure: the uid and gid are not looked up here. slurmctld resolves the name when the job is
submitted (held), and the executor reads them from the job record (executor.py).
"""

from __future__ import annotations

from starforge_api.executor.v1 import launch_request_pb2 as lr_pb

from common import errors
from executor_svc.slurm.config import SlurmConfig


def unix_user(cfg: SlurmConfig, request: lr_pb.LaunchRequest) -> str:
    """The Unix user `request` runs as; PermissionDenied for an unmapped owner under `refuse`."""
    tenants = cfg.tenants
    if not tenants.enabled:
        return cfg.user
    if request.project and request.project in tenants.projects:
        return tenants.projects[request.project]
    if request.owner and request.owner in tenants.users:
        return tenants.users[request.owner]
    if tenants.unmapped == "default":
        return tenants.default_user
    raise errors.PermissionDenied(
        f"owner {request.owner or '(none)'!r} (project {request.project or '(none)'!r}) has no Unix user on "
        f"Slurm fleet {cfg.executor_name!r}: ask an administrator to add it to slurm.tenants.users "
        "(or .projects) of that executor",
        metadata={"owner": request.owner, "project": request.project, "executor": cfg.executor_name},
    )
