"""Tenants on one Slurm executor cannot reach each other's attempts (`slurm.tenants`).

Against the real Slurm 24.11 test cluster: the executor submits with root's token (SlurmUser) and
slurmrestd runs each job as its owner's Unix user: alice -> sf-tenant-a, bob -> sf-tenant-b
(users of the cluster's chroot; their uids are slurmctld's). The hostile tenant is the code
inside alice's job. Bob's job runs first and waits; alice's job, told every path of bob's
attempt, tries to list, read and write bob's attempt dir, scratch, run-token file, capsule and
out dir: every try fails with "Permission denied". It then forges an executor record in its own
attempt dir naming bob's Slurm job and links its job.log to bob's checkpoint: the executor (root)
neither follows the link nor acts on the forged record. Bob's job then finishes SUCCEEDED with
its own output intact and its run token still readable by itself.
"""

from __future__ import annotations

import pathlib

import pytest
from starforge_api.executor.v1 import launch_request_pb2 as lr_pb
from starforge_api.job.v1 import job_state_pb2 as st

from executor_svc.capsule_env import TOKEN_FILE
from executor_svc.slurm import SlurmExecutor
from tests.integration.blob_server import BlobServer
from tests.integration.executors.launch_requests import launch_request, shell_capsule, wait_for, wait_for_log
from tests.integration.slurm.executor_fixtures import (
    TENANT_A,
    TENANT_B,
    slurm_blobs,
    slurm_root,
    slurm_tenant_executor,
)
from tools.slurm.chroot import TENANT_USERS

pytestmark = pytest.mark.slurm
__all__ = ["slurm_blobs", "slurm_root", "slurm_tenant_executor"]  # fixtures, imported for pytest

# One bootstrap.sh for both tenants; MODE picks the part. Every try records its stderr, so the
# test can tell "Permission denied" from a path that merely does not exist.
SCRIPT = r"""#!/bin/sh
out="$FORGE_OUT_DIR"
id -u > "$out/uid.txt"
if [ "$MODE" = victim ]; then
	echo "bob's checkpoint" > "$out/ckpt.txt"
	echo "victim waiting"
	i=0
	while [ ! -e "$out/go" ] && [ $i -lt 600 ]; do sleep 0.2; i=$((i + 1)); done
	[ -e "$out/go" ] || exit 3
	[ "$(cat "$out/ckpt.txt")" = "bob's checkpoint" ] || exit 4
	[ -s "$FORGE_INGEST_TOKEN_FILE" ] || exit 5
	ls -A "$FORGE_SCRATCH_DIR" > "$out/scratch.txt"
	exit 0
fi
try() {
	name=$1; shift
	if err=$( ( "$@" ) 2>&1 >/dev/null); then echo "$name: done"; else echo "$name: refused: $err"; fi
}
{
	try "list attempt dir" ls "$B_ATTEMPT"
	try "read job log" cat "$B_ATTEMPT/job.log"
	try "read run token" cat "$B_TOKEN"
	try "read capsule" cat "$B_ATTEMPT/capsule/bootstrap.sh"
	try "write attempt dir" sh -c "echo x > '$B_ATTEMPT/planted'"
	try "write scratch" sh -c "echo x > '$B_ATTEMPT/scratch/planted'"
	try "replace run token" sh -c "echo stolen > '$B_TOKEN'"
	try "list out dir" ls "$B_OUT"
	try "read checkpoint" cat "$B_OUT/ckpt.txt"
	try "write checkpoint" sh -c "echo poisoned > '$B_OUT/ckpt.txt'"
	try "write out dir" sh -c "echo x > '$B_OUT/planted'"
	try "remove out dir" rm -rf "$B_OUT"
} > "$out/attack.txt"
# Its own attempt dir is the job's: it forges the executor's record there (naming bob's Slurm
# job) and turns its log into a link to bob's checkpoint, for the executor (root) to follow.
stage=$(dirname "$FORGE_SCRATCH_DIR")
printf '{"attempt_id": "%s", "job_id": "%s", "attempt_number": 1, "slurm_job_id": %s, "out_dir": "%s", "created_at": 0}' \
	"$FORGE_ATTEMPT_ID" "$FORGE_JOB_ID" "$B_SLURM_JOB" "$B_OUT" > "$stage/attempt.json"
ln -sf "$B_OUT/ckpt.txt" "$stage/job.log"
"""
TRIES = 12


def _request(blobs: BlobServer, owner: str, mode: str, env: dict[str, str] | None = None) -> lr_pb.LaunchRequest:
    req = launch_request(blobs, shell_capsule(SCRIPT), series="h100", env={"MODE": mode, **(env or {})})
    req.owner = owner
    req.project = f"@{owner}/lab"
    return req


async def test_a_tenants_job_cannot_read_or_write_another_tenants_attempt(
    slurm_tenant_executor: SlurmExecutor, slurm_blobs: BlobServer
) -> None:
    ex = slurm_tenant_executor
    victim = _request(slurm_blobs, "bob", "victim")
    bob = await ex.launch(victim)
    await wait_for_log(ex, victim.attempt_id, "victim waiting", timeout=120)
    b_attempt = ex.layout.attempt(victim.attempt_id).root
    b_out = pathlib.Path(bob.out_dir)
    b_token = ex.layout.attempt(victim.attempt_id).scratch / TOKEN_FILE
    uid_b = TENANT_USERS[TENANT_B]
    for path in (b_attempt, b_attempt / "scratch", b_out):
        assert (path.stat().st_uid, path.stat().st_gid, path.stat().st_mode & 0o777) == (uid_b, uid_b, 0o700), path
    assert (b_token.stat().st_uid, b_token.stat().st_mode & 0o777) == (uid_b, 0o600)

    env = {
        "B_ATTEMPT": str(b_attempt),
        "B_OUT": str(b_out),
        "B_TOKEN": str(b_token),
        "B_SLURM_JOB": bob.backend_handle,
    }
    attack = _request(slurm_blobs, "alice", "attack", env)
    alice = await ex.launch(attack)
    obs = await wait_for(ex, attack.attempt_id, timeout=120)
    assert obs.state == st.JOB_STATE_SUCCEEDED, obs
    a_out = pathlib.Path(alice.out_dir)
    assert (a_out / "uid.txt").read_text().strip() == str(TENANT_USERS[TENANT_A])
    assert a_out.stat().st_uid == TENANT_USERS[TENANT_A]
    lines = (a_out / "attack.txt").read_text().splitlines()
    assert len(lines) == TRIES, lines
    assert all(": refused: " in line and "Permission denied" in line for line in lines), lines
    # The forged record and the linked log change nothing the executor says or does.
    a_attempt = ex.layout.attempt(attack.attempt_id).root
    assert (a_attempt / "job.log").is_symlink() and (a_attempt / "attempt.json").is_file()
    (obs,) = await ex.observe([attack.attempt_id])
    assert obs.state == st.JOB_STATE_SUCCEEDED and obs.backend_handle == alice.backend_handle, obs
    assert not any("checkpoint" in line for line in obs.log_tail), obs.log_tail
    assert not await ex.stop(attack.attempt_id, 1.0)
    (obs,) = await ex.observe([victim.attempt_id])
    assert obs.state == st.JOB_STATE_RUNNING, obs

    (b_out / "go").touch()
    obs = await wait_for(ex, victim.attempt_id, timeout=120)
    assert obs.state == st.JOB_STATE_SUCCEEDED, (obs, (b_attempt / "job.log").read_text())
    assert (b_out / "uid.txt").read_text().strip() == str(uid_b)
    assert (b_out / "ckpt.txt").read_text() == "bob's checkpoint\n"
    assert not (b_out / "planted").exists()
    assert not (b_attempt / "planted").exists()
    assert (b_out / "scratch.txt").read_text().split() == [TOKEN_FILE]
    assert b_token.read_text() == victim.ingest.token
