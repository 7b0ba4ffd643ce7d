"""`slurm.tenants` and the recorded image digest, against the real Slurm 24.11 test cluster.

Owners map to the chroot's tenant users (alice -> sf-tenant-a, bob -> sf-tenant-b); the executor
submits with root's token and slurmrestd runs each job as its owner's user. The attack between
tenants is tests/security/test_slurm_tenants.py; here: who runs as whom, the policy for
unmapped owners, heterogeneous jobs, and the image digest each attempt records.
"""

from __future__ import annotations

import hashlib
import pathlib

import pytest
from starforge_api.executor.v1 import launch_request_pb2 as lr_pb
from starforge_api.job.v1 import job_spec_pb2 as spec_pb
from starforge_api.job.v1 import job_state_pb2 as st

from common import errors
from executor_svc.slurm import SlurmExecutor
from executor_svc.slurm.images import NO_CONTAINER
from executor_svc.slurm.staging import AttemptRecord
from tests.integration.backends.slurm import ClusterInfo
from tests.integration.blob_server import BlobServer
from tests.integration.executors.launch_requests import launch_request, shell_capsule, wait_for
from tools.slurm.chroot import JOB_UID, TENANT_USERS

from .executor_fixtures import (
    TENANT_A,
    TENANT_B,
    cancel_everything,
    make_config,
    slurm_blobs,
    slurm_root,
    slurm_section,
    slurm_tenant_executor,
    tenant_section,
)

pytestmark = pytest.mark.slurm
__all__ = ["slurm_blobs", "slurm_root", "slurm_tenant_executor"]  # fixtures, imported for pytest

WHOAMI = 'id -un > "$FORGE_OUT_DIR/user.txt"\n'


def _request(blobs: BlobServer, owner: str, script: str = WHOAMI, **kwargs: object) -> lr_pb.LaunchRequest:
    req = launch_request(blobs, shell_capsule(script), series="h100", **kwargs)  # type: ignore[arg-type]
    req.owner = owner
    req.project = f"@{owner}/lab"
    return req


async def _run(ex: SlurmExecutor, req: lr_pb.LaunchRequest) -> pathlib.Path:
    launched = await ex.launch(req)
    obs = await wait_for(ex, req.attempt_id, timeout=120)
    assert obs.state == st.JOB_STATE_SUCCEEDED, (obs, ex.layout.attempt(req.attempt_id).root)
    return pathlib.Path(launched.out_dir)


async def test_each_owner_runs_as_its_unix_user_with_the_clusters_uid(
    slurm_tenant_executor: SlurmExecutor, slurm_blobs: BlobServer
) -> None:
    ex = slurm_tenant_executor
    for owner, user in (("alice", TENANT_A), ("bob", TENANT_B)):
        req = _request(slurm_blobs, owner)
        out = await _run(ex, req)
        assert (out / "user.txt").read_text().strip() == user
        assert out.stat().st_uid == TENANT_USERS[user]
        record = AttemptRecord.load(ex.layout.attempt(req.attempt_id).record)
        assert record is not None and record.unix_user == user
        # A second Launch of the same attempt is answered from the record.
        again = await ex.launch(req)
        assert again.already_launched and again.backend_handle == str(record.slurm_job_id)
    # Jobs of every mapped user are this executor's: list finds them.
    listed = {o.attempt_id for o in await ex.list_attempts()}
    assert len(listed) == 2


async def test_an_unmapped_owner_is_refused_before_anything_is_staged(
    slurm_tenant_executor: SlurmExecutor, slurm_blobs: BlobServer
) -> None:
    ex = slurm_tenant_executor
    req = _request(slurm_blobs, "carol")
    with pytest.raises(errors.PermissionDenied) as refused:
        await ex.launch(req)
    assert "'carol'" in refused.value.message and "slurm.tenants.users" in refused.value.message
    assert not ex.layout.attempt(req.attempt_id).root.exists()
    assert await ex._our_jobs() == []


async def test_unmapped_default_runs_as_the_default_user_and_projects_win(
    slurm_cluster: ClusterInfo, slurm_blobs: BlobServer, slurm_root: pathlib.Path
) -> None:
    section = tenant_section(
        slurm_cluster,
        slurm_root,
        unmapped="default",
        default_user=slurm_cluster.user,
        projects={"@alice/shared": TENANT_B},
    )
    ex = await SlurmExecutor.create(make_config(section))
    try:
        carol = _request(slurm_blobs, "carol")
        out = await _run(ex, carol)
        assert (out / "user.txt").read_text().strip() == slurm_cluster.user
        assert out.stat().st_uid == JOB_UID
        shared = _request(slurm_blobs, "alice")
        shared.project = "@alice/shared"
        out = await _run(ex, shared)
        assert (out / "user.txt").read_text().strip() == TENANT_B
    finally:
        await cancel_everything(ex)
        await ex.close()


async def test_a_tenants_heterogeneous_job_is_released_whole(
    slurm_cluster: ClusterInfo, slurm_blobs: BlobServer, slurm_root: pathlib.Path
) -> None:
    section = tenant_section(slurm_cluster, slurm_root)
    section["ray"] = {"enabled": False}
    ex = await SlurmExecutor.create(make_config(section))
    try:
        script = WHOAMI + "srun --het-group=1 --overlap sh -c 'echo \"component1 $(id -un)\"'\n"
        pools = [
            spec_pb.Pool(name="main", series="h100", nodes=1, gpus_per_node=1),
            spec_pb.Pool(name="rollout", series="h100", nodes=1, gpus_per_node=1),
        ]
        req = _request(slurm_blobs, "bob", script, pools=pools)
        out = await _run(ex, req)
        assert (out / "user.txt").read_text().strip() == TENANT_B
        (obs,) = await ex.observe([req.attempt_id])
        assert f"component1 {TENANT_B}" in obs.log_tail, obs.log_tail
    finally:
        await cancel_everything(ex)
        await ex.close()


async def test_a_job_without_a_container_records_that_it_had_no_image(
    slurm_tenant_executor: SlurmExecutor, slurm_blobs: BlobServer
) -> None:
    ex = slurm_tenant_executor
    req = _request(slurm_blobs, "alice")
    launched = await ex.launch(req)
    assert launched.image_digest == NO_CONTAINER
    again = await ex.launch(req)
    assert again.image_digest == NO_CONTAINER


# A stand-in for `apptainer exec [--nv] --bind B --pwd W IMAGE CMD...` (the chroot has no
# apptainer): it opens the image file, records the sha256 of the bytes it read, and runs CMD on
# the node. The attempt's recorded digest must be the digest of the file the job ran from.
APPTAINER = r"""#!/bin/sh
[ "$1" = exec ] && shift
while :; do
	case "$1" in
	--nv) shift ;;
	--bind) shift 2 ;;
	--pwd) cd "$2" || exit 1; shift 2 ;;
	*) break ;;
	esac
done
image=$1; shift
sha256sum < "$image" | cut -d' ' -f1 > "$FORGE_OUT_DIR/ran-image.txt" || exit 1
exec "$@"
"""


async def test_an_image_file_is_recorded_by_its_sha256(
    slurm_cluster: ClusterInfo, slurm_blobs: BlobServer, slurm_root: pathlib.Path
) -> None:
    slurm_root.mkdir(parents=True, exist_ok=True)
    slurm_root.chmod(0o755)
    tools = slurm_root / "tools"
    tools.mkdir(mode=0o755)
    shim = tools / "apptainer"
    shim.write_text(APPTAINER)
    shim.chmod(0o755)
    sif = tools / "train.sif"
    sif.write_bytes(b"SIF image bytes " * 4096)
    sif.chmod(0o644)
    section = slurm_section(
        slurm_cluster,
        slurm_root,
        container_runtime="apptainer",
        apptainer_command=str(shim),
        runtimes={"registry.local/train:v1": str(sif)},
    )
    ex = await SlurmExecutor.create(make_config(section))
    try:
        req = launch_request(slurm_blobs, shell_capsule("true\n"), series="h100", image="registry.local/train:v1")
        launched = await ex.launch(req)
        expected = "sha256:" + hashlib.sha256(sif.read_bytes()).hexdigest()
        assert launched.image_digest == expected
        obs = await wait_for(ex, req.attempt_id, timeout=120)
        assert obs.state == st.JOB_STATE_SUCCEEDED, (obs, ex.layout.attempt(req.attempt_id).root)
        ran = (pathlib.Path(launched.out_dir) / "ran-image.txt").read_text().strip()
        assert "sha256:" + ran == expected
        record = AttemptRecord.load(ex.layout.attempt(req.attempt_id).record)
        assert record is not None and record.image_digest == expected
    finally:
        await cancel_everything(ex)
        await ex.close()
