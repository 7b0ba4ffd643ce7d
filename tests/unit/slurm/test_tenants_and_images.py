"""`slurm.tenants` (config checks, owner -> Unix user), reading the job's files safely, and the image
digest an attempt records (pure)."""

from __future__ import annotations

import hashlib
import os
import pathlib
from typing import Any

import pytest
from starforge_api.executor.v1 import launch_request_pb2 as lr_pb

from common import errors
from common.config import ConfigError, build_dataclass
from executor_svc.slurm.config import SlurmConfig
from executor_svc.slurm.images import NO_CONTAINER, image_digest
from executor_svc.slurm.script import Container
from executor_svc.slurm.staging import Layout, read_log_tail, read_marker, read_outcome, read_started
from executor_svc.slurm.tenants import unix_user

USERS = {"alice": "sf-alice", "bob": "sf-bob"}


def config(**tenants: Any) -> SlurmConfig:
    base = {"staging_dir": "/shared/staging", "out_dir": "/shared/out", "token": "t", "user": "root"}
    return build_dataclass(SlurmConfig, base | {"tenants": tenants}, "slurm")


def request(owner: str, project: str = "") -> lr_pb.LaunchRequest:
    return lr_pb.LaunchRequest(owner=owner, project=project or f"@{owner}/lab")


def test_without_tenants_every_job_runs_as_the_sections_user() -> None:
    cfg = config()
    assert not cfg.tenants.enabled
    assert unix_user(cfg, request("anyone")) == "root"


def test_owners_map_to_their_users_and_projects_win() -> None:
    cfg = config(users=USERS, projects={"@alice/shared": "sf-team"})
    assert unix_user(cfg, request("alice")) == "sf-alice"
    assert unix_user(cfg, request("bob")) == "sf-bob"
    assert unix_user(cfg, request("alice", "@alice/shared")) == "sf-team"
    assert cfg.tenants.unix_users() == {"sf-alice", "sf-bob", "sf-team"}


def test_an_unmapped_owner_is_refused_or_runs_as_the_default_user() -> None:
    with pytest.raises(errors.PermissionDenied, match=r"'carol'.*slurm\.tenants\.users"):
        unix_user(config(users=USERS), request("carol"))
    cfg = config(users=USERS, unmapped="default", default_user="sf-shared")
    assert unix_user(cfg, request("carol")) == "sf-shared"
    assert "sf-shared" in cfg.tenants.unix_users()


@pytest.mark.parametrize(
    ("tenants", "extra", "message"),
    [
        ({"users": USERS, "unmapped": "allow"}, {}, "tenants.unmapped: 'allow'"),
        ({"users": USERS, "unmapped": "default"}, {}, "default_user: name the Unix user"),
        ({"users": USERS, "default_user": "x"}, {}, "only with unmapped: default"),
        ({"unmapped": "default", "default_user": "x"}, {}, "need users or projects"),
        ({"users": {"alice": "root"}}, {}, "never run as root"),
        ({"users": {"alice": "Bad User"}}, {}, "not a Unix user name"),
        ({"projects": {"lab": "sf-x"}}, {}, "not a project"),
        ({"users": USERS}, {"job_uid": 1000, "job_gid": 1000}, "do not apply with slurm.tenants"),
        ({"users": USERS}, {"job_fields": {"user_id": 0}}, "user_id are set by the executor"),
        ({"users": USERS}, {"job_fields": {"hold": False}}, "hold are set by the executor"),
    ],
)
def test_bad_tenants_are_refused_when_loaded(tenants: dict[str, Any], extra: dict[str, Any], message: str) -> None:
    base = {"staging_dir": "/s", "out_dir": "/o", "token": "t", "user": "root", "tenants": tenants}
    with pytest.raises(ConfigError, match=message):
        build_dataclass(SlurmConfig, base | extra, "slurm")


async def test_image_digests_say_what_ran(tmp_path: pathlib.Path) -> None:
    req = lr_pb.LaunchRequest(image="registry.local/x:1")
    assert await image_digest(None, req) == NO_CONTAINER
    sif = tmp_path / "x.sif"
    sif.write_bytes(b"image")
    digest = await image_digest(Container("apptainer", str(sif)), req)
    assert digest == "sha256:" + hashlib.sha256(b"image").hexdigest()
    sif.write_bytes(b"changed image")  # a new file content is hashed again
    assert (
        await image_digest(Container("apptainer", str(sif)), req)
        == "sha256:" + hashlib.sha256(b"changed image").hexdigest()
    )
    missing = await image_digest(Container("apptainer", str(tmp_path / "gone.sif")), req)
    assert missing.startswith(f"unresolved:{tmp_path / 'gone.sif'} (not readable")
    assert await image_digest(Container("pyxis", "registry.local#x:1"), req) == (
        "unresolved:registry.local#x:1 (pyxis pulls it at run time)"
    )
    resolved = lr_pb.LaunchRequest(image="registry.local/x:1", image_digest="sha256:" + "a" * 64)
    assert await image_digest(Container("pyxis", "registry.local#x:1"), resolved) == resolved.image_digest


def test_job_files_are_read_only_when_they_are_regular_files(tmp_path: pathlib.Path) -> None:
    """The job's user owns its attempt dir: the executor (root) follows no link and opens no FIFO
    there, and the record lives in the executor's own dir."""
    secret = tmp_path / "other-tenant.txt"
    secret.write_text("1700000000\nsecret line\n")
    stage = tmp_path / "stage"
    stage.mkdir()
    (stage / "job.log").symlink_to(secret)
    (stage / "started").symlink_to(secret)
    os.mkfifo(stage / "outcome")
    assert read_log_tail(stage / "job.log") == []
    assert read_started(stage / "started") is None
    assert read_outcome(stage / "outcome") is None  # a FIFO would block a plain open()
    assert read_marker(stage / "missing") is None
    (stage / "started2").write_text("1700000000\n")
    assert read_started(stage / "started2") is not None
    layout = Layout(tmp_path / "staging", tmp_path / "out")
    dirs = layout.attempt("j0000000000000.1")
    assert dirs.record == tmp_path / "staging" / ".records" / "j0000000000000.1.json"
    assert dirs.root not in dirs.record.parents
