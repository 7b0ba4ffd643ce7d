"""How one LaunchRequest maps onto Slurm: job components, image, Ray, environment (pure).

Everything here is decided before anything is staged or submitted, so a request this fleet can
never run is refused (InvalidArgument) without side effects.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from starforge_api.executor.v1 import launch_request_pb2 as lr_pb

from common import errors
from executor_svc.capsule_env import CapsulePaths, capsule_env, stop_grace
from executor_svc.plumbing.pools import PoolRules, Shape, check_pools
from executor_svc.slurm.config import SeriesConfig, SlurmConfig
from executor_svc.slurm.script import Component, Container, RaySpec, wants_ray
from executor_svc.slurm.staging import AttemptDirs

HOST_IMAGE = "host"
SLURM_POOLS = PoolRules(kind="slurm", place="in this Slurm fleet", multi_pool=True, multi_node=True)
_SHELL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def pyxis_image(ref: str) -> str:
    """An OCI reference as pyxis/enroot spell it: `registry.local/train:v1` -> `registry.local#train:v1`."""
    if "#" in ref or "://" in ref or ref.startswith("/"):
        return ref
    first, sep, rest = ref.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return f"{first}#{rest}"
    return ref


def plan_components(cfg: SlurmConfig, request: lr_pb.LaunchRequest) -> list[tuple[Component, SeriesConfig]]:
    """The request's pools as job components, or InvalidArgument why they can never run here."""
    shapes = {s.series: Shape(s.nodes, s.gpus_per_node) for s in cfg.inventory}
    out = []
    for i, pool in enumerate(check_pools(request.pools, SLURM_POOLS, shapes)):
        series = cfg.series(pool.series)
        assert series is not None  # check_pools refused unknown series
        nodes = max(1, pool.nodes)
        out.append((Component(pool.name or f"pool{i}", nodes, pool.gpus_per_node, series.cpus_per_node), series))
    return out


def container_for(cfg: SlurmConfig, request: lr_pb.LaunchRequest, dirs: AttemptDirs) -> Container | None:
    """What image the steps run in (None: bare on the host), or InvalidArgument."""
    image = request.image or HOST_IMAGE
    if cfg.container_runtime == "none":
        if image != HOST_IMAGE:
            raise errors.InvalidArgument(
                f"this Slurm fleet runs capsules on the host (container_runtime: none) and cannot run "
                f"image {image}; use image 'host' or a fleet with pyxis or apptainer",
                field_violations=(errors.FieldViolation("image", "not 'host'"),),
            )
        return None
    artifact = cfg.runtimes.get(request.runtime_id) or cfg.runtimes.get(image) or ""
    if not artifact:
        if image == HOST_IMAGE:
            raise errors.InvalidArgument(
                f"this Slurm fleet runs images ({cfg.container_runtime}); image 'host' needs a host fleet",
                field_violations=(errors.FieldViolation("image", "'host' on a container fleet"),),
            )
        if cfg.container_runtime == "apptainer":
            raise errors.InvalidArgument(
                f"no SIF for runtime {request.runtime_id!r} or image {image} on this Slurm fleet; "
                "an admin maps it under slurm.runtimes",
                field_violations=(errors.FieldViolation("runtime_id", "not in slurm.runtimes"),),
            )
        artifact = pyxis_image(image)
    mounts = (f"{cfg.staging_dir}:{cfg.staging_dir}", f"{cfg.out_dir}:{cfg.out_dir}", *cfg.container_mounts)
    return Container(
        runtime=cfg.container_runtime,
        image=artifact,
        mounts=mounts,
        workdir=str(dirs.workspace),
        apptainer_command=cfg.apptainer_command,
    )


def ray_spec(cfg: SlurmConfig, components: Sequence[Component]) -> RaySpec | None:
    r = cfg.ray
    if not r.enabled or not wants_ray(components):
        return None
    return RaySpec(
        command=r.command,
        node_ip=r.node_ip,
        port=r.port,
        start_timeout_seconds=r.start_timeout_seconds,
        object_store_memory_bytes=r.object_store_memory_bytes,
        temp_dir=r.temp_dir,
        extra_start_args=tuple(r.extra_start_args),
        python=cfg.python,
        token_auth=r.token_auth,
    )


def split_environment(
    cfg: SlurmConfig, request: lr_pb.LaunchRequest, dirs: AttemptDirs, out_dir: Path
) -> tuple[dict[str, str], dict[str, str]]:
    """(exported in the script, passed in the job's environment): secrets only in the latter."""
    env = capsule_env(
        request,
        CapsulePaths(
            capsule=str(dirs.capsule),
            workspace=str(dirs.workspace),
            out=str(out_dir),
            scratch=str(dirs.scratch),
            datasets=str(dirs.datasets),
        ),
        stop_grace_seconds=stop_grace(request, cfg.default_stop_grace_seconds),
    )
    # The run token is in neither: it is in a 0600 file in the scratch dir (capsule_env.py).
    secret = set(request.secret_env)
    exports = {k: v for k, v in env.items() if k not in secret and _SHELL_NAME.match(k)}
    job_env = {"PATH": cfg.path} | {k: v for k, v in env.items() if k not in exports}
    return exports, job_env
