"""Slurm jobs cannot change what other jobs run or read, nor find other attempts' directories.

Against the real Slurm 24.11 test cluster: the executor runs as root and jobs as the cluster's job
user (`slurm.job_uid`). The hostile tenant is the code inside alice's job. It lists the staging
and out roots (to find other attempts' and jobs' directories) and rewrites its capsule's
bootstrap.sh and its dataset file, which are hard links into the executor's blob cache on the
shared file system: all refused. Bob's job with the same capsule and dataset content then runs
and proves by digests that it got the original bytes.

Jobs of different tenants are kept out of each other's attempt and out directories by the
directories' owners (0700, the job's uid): that needs one Unix user per tenant (`slurm.tenants`,
docs/executors-slurm.md), proven in test_slurm_tenants.py. This module proves the parts that do
not depend on it, with every job running as the one job user.
"""

from __future__ import annotations

import hashlib
import pathlib

import pytest
from starforge_api.executor.v1 import launch_request_pb2 as lr_pb
from starforge_api.job.v1 import job_state_pb2 as st
from starforge_api.job.v1 import workspace_pb2 as ws_pb

from executor_svc.slurm import SlurmExecutor
from tests.integration.blob_server import BlobServer
from tests.integration.executors.launch_requests import launch_request, shell_capsule, wait_for
from tests.integration.slurm.executor_fixtures import slurm_blobs, slurm_executor, slurm_root

pytestmark = pytest.mark.slurm
__all__ = ["slurm_blobs", "slurm_executor", "slurm_root"]  # fixtures, imported for pytest

ROWS = b'{"text": "the original row"}\n'

# One bootstrap.sh for both jobs (same content, same cache entry); MODE picks the part.
SCRIPT = r"""#!/bin/sh
out="$FORGE_OUT_DIR"
data="$TRAIN_DATA_DIR/rows.jsonl"
boot="$FORGE_CAPSULE_DIR/bootstrap.sh"
try() { name=$1; shift; if ( "$@" ) 2>/dev/null; then echo "$name: done"; else echo "$name: refused"; fi; }
if [ "$MODE" = attack ]; then
	{
		try "list staging root" ls "$(dirname "$(dirname "$FORGE_CAPSULE_DIR")")"
		try "list out root" ls "$(dirname "$FORGE_OUT_DIR")"
		try "write bootstrap.sh" sh -c "echo 'echo poisoned' >> '$boot'"
		try "chmod bootstrap.sh" chmod 777 "$boot"
		try "replace bootstrap.sh" sh -c "echo 'echo poisoned' > '$boot.new' && mv -f '$boot.new' '$boot'"
		try "write dataset" sh -c "echo poisoned >> '$data'"
		try "chmod dataset" chmod 666 "$data"
		try "replace dataset" sh -c "echo poisoned > '$data.new' && mv -f '$data.new' '$data'"
	} > "$out/attack.txt"
else
	sha256sum "$boot" "$data" | cut -d' ' -f1 > "$out/report.txt"
fi
"""


def _request(blobs: BlobServer, mode: str) -> lr_pb.LaunchRequest:
    req = launch_request(blobs, shell_capsule(SCRIPT), series="h100", env={"MODE": mode})
    digest = blobs.store.put_bytes(ROWS)
    req.datasets.append(
        lr_pb.ResolvedDataset(
            name="train",
            ref=f"{mode}/rows@v1",
            manifest=ws_pb.WorkspaceManifest(
                files=[ws_pb.WorkspaceFile(path="rows.jsonl", sha256=digest, size=len(ROWS))]
            ),
        )
    )
    return req


async def test_a_slurm_job_cannot_poison_the_cache_or_list_other_attempts(
    slurm_executor: SlurmExecutor, slurm_blobs: BlobServer
) -> None:
    ex = slurm_executor
    attack = _request(slurm_blobs, "attack")
    result = await ex.launch(attack)
    obs = await wait_for(ex, attack.attempt_id, timeout=120)
    assert obs.state == st.JOB_STATE_SUCCEEDED, obs
    lines = (pathlib.Path(result.out_dir) / "attack.txt").read_text().splitlines()
    assert len(lines) == 8, lines
    assert all(line.endswith(": refused") for line in lines), lines

    boot = hashlib.sha256(SCRIPT.encode()).hexdigest()
    for name in (boot, boot + ".x"):
        entry = ex.cfg.blob_cache / boot[:2] / name
        assert entry.read_bytes() == SCRIPT.encode(), entry
    rows = hashlib.sha256(ROWS).hexdigest()
    assert (ex.cfg.blob_cache / rows[:2] / rows).read_bytes() == ROWS

    victim = _request(slurm_blobs, "report")
    result = await ex.launch(victim)
    obs = await wait_for(ex, victim.attempt_id, timeout=120)
    assert obs.state == st.JOB_STATE_SUCCEEDED, obs
    report = (pathlib.Path(result.out_dir) / "report.txt").read_text().split()
    assert report == [boot, rows]
    # Each attempt's and each job's directory is its job user's alone.
    for path in (ex.layout.attempt(victim.attempt_id).root, pathlib.Path(result.out_dir)):
        assert path.stat().st_mode & 0o777 == 0o700, path
