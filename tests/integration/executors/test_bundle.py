"""executor_svc.bundle against the real control-plane BlobService (real token auth)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import pathlib
import shutil
import stat

import pytest
from starforge_api.executor.v1 import launch_request_pb2 as lr_pb
from starforge_api.job.v1 import workspace_pb2 as ws_pb

from common import errors
from executor_svc import bundle
from executor_svc.plumbing.blob_channels import BlobChannels
from tests.integration.blob_server import BlobServer, blob_server
from tests.integration.executors.launch_requests import launch_request, shell_capsule


def _dirs(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path, pathlib.Path, pathlib.Path]:
    return tmp_path / "capsule", tmp_path / "workspace", tmp_path / "cache", tmp_path / "datasets"


async def test_materialize_places_every_file_from_the_cache(blobs: BlobServer, tmp_path: pathlib.Path) -> None:
    workspace: dict[str, bytes | tuple[bytes, bool]] = {
        "train.sh": (b"#!/bin/sh\necho train\n", True),
        "experiments/demo/config.yaml": b"lr: 0.1\n",
        "same-content-a.txt": b"twin\n",
        "deep/er/same-content-b.txt": (b"twin\n", True),
    }
    req = launch_request(blobs, shell_capsule("echo hi\n", workspace))
    data = b'{"text": "row"}\n'
    ds_file = ws_pb.WorkspaceFile(
        path="part-0.jsonl", sha256=blobs.store.put_bytes(data), size=len(data), executable=False
    )
    req.datasets.append(
        lr_pb.ResolvedDataset(name="train", ref="tester/d@1", manifest=ws_pb.WorkspaceManifest(files=[ds_file]))
    )
    capsule_dir, workspace_dir, cache_dir, datasets_dir = _dirs(tmp_path)

    await bundle.materialize(req, capsule_dir, workspace_dir, cache_dir, datasets_dir, share_cache=True)

    assert (capsule_dir / "bootstrap.sh").read_bytes() == b"echo hi\n"
    assert (workspace_dir / "experiments/demo/config.yaml").read_bytes() == b"lr: 0.1\n"
    assert (datasets_dir / "train" / "part-0.jsonl").read_bytes() == data

    def mode(p: pathlib.Path) -> int:
        return stat.S_IMODE(p.stat().st_mode)

    # capsule and dataset files are read-only, workspace files the job's
    assert mode(capsule_dir / "bootstrap.sh") == 0o555
    assert mode(datasets_dir / "train" / "part-0.jsonl") == 0o444
    assert mode(workspace_dir / "train.sh") == 0o755
    assert mode(workspace_dir / "experiments/demo/config.yaml") == 0o644
    # same content, different modes: two cache entries, each file keeps its own mode
    assert mode(workspace_dir / "same-content-a.txt") == 0o644
    assert mode(workspace_dir / "deep/er/same-content-b.txt") == 0o755
    # content-addressed cache; capsule and dataset files are hard links into it (share_cache: the
    # job cannot write them), workspace files are copies (a job that edits its workspace in place
    # must not corrupt the cache)
    digest = hashlib.sha256(b"lr: 0.1\n").hexdigest()
    cached = cache_dir / digest[:2] / digest
    assert cached.read_bytes() == b"lr: 0.1\n"
    assert not os.path.samefile(cached, workspace_dir / "experiments/demo/config.yaml")
    (workspace_dir / "experiments/demo/config.yaml").write_bytes(b"edited in place\n")
    assert cached.read_bytes() == b"lr: 0.1\n"
    ds_digest = hashlib.sha256(data).hexdigest()
    assert os.path.samefile(cache_dir / ds_digest[:2] / ds_digest, datasets_dir / "train" / "part-0.jsonl")
    boot = hashlib.sha256(b"echo hi\n").hexdigest()
    assert os.path.samefile(cache_dir / boot[:2] / (boot + ".x"), capsule_dir / "bootstrap.sh")
    assert not list((cache_dir / "tmp").iterdir())
    assert stat.S_IMODE(cache_dir.stat().st_mode) == 0o700


async def test_without_share_cache_capsule_and_datasets_are_private_read_only_copies(
    blobs: BlobServer, tmp_path: pathlib.Path
) -> None:
    req = launch_request(blobs, shell_capsule("echo private\n"))
    capsule_dir, workspace_dir, cache_dir, _ = _dirs(tmp_path)
    await bundle.materialize(req, capsule_dir, workspace_dir, cache_dir)
    boot = hashlib.sha256(b"echo private\n").hexdigest()
    assert not os.path.samefile(cache_dir / boot[:2] / boot, capsule_dir / "bootstrap.sh")
    assert stat.S_IMODE((capsule_dir / "bootstrap.sh").stat().st_mode) == 0o555
    assert stat.S_IMODE((cache_dir / boot[:2] / boot).stat().st_mode) == 0o444


async def test_a_modified_cache_entry_is_evicted_and_the_launch_refused(
    blobs: BlobServer, tmp_path: pathlib.Path
) -> None:
    req = launch_request(blobs, shell_capsule("echo original\n"))
    capsule_dir, workspace_dir, cache_dir, _ = _dirs(tmp_path)
    await bundle.materialize(req, capsule_dir, workspace_dir, cache_dir)
    boot = hashlib.sha256(b"echo original\n").hexdigest()
    entry = cache_dir / boot[:2] / boot
    entry.chmod(0o644)
    entry.write_bytes(b"echo evil\n")
    with pytest.raises(errors.FailedPrecondition) as e:
        await bundle.materialize(req, tmp_path / "c2", tmp_path / "w2", cache_dir)
    assert "capsule/bootstrap.sh: the executor's cache entry" in e.value.message
    assert not entry.exists() and not (tmp_path / "c2" / "bootstrap.sh").exists()
    await bundle.materialize(req, tmp_path / "c3", tmp_path / "w3", cache_dir)  # fetched afresh
    assert (tmp_path / "c3" / "bootstrap.sh").read_bytes() == b"echo original\n"


async def test_verify_bootstrap_refuses_a_changed_file(blobs: BlobServer, tmp_path: pathlib.Path) -> None:
    req = launch_request(blobs, shell_capsule("echo checked\n"))
    capsule_dir, workspace_dir, cache_dir, _ = _dirs(tmp_path)
    await bundle.materialize(req, capsule_dir, workspace_dir, cache_dir)
    bundle.verify_bootstrap(req, capsule_dir)
    (capsule_dir / "bootstrap.sh").chmod(0o755)
    (capsule_dir / "bootstrap.sh").write_bytes(b"echo tampered\n")
    with pytest.raises(errors.FailedPrecondition) as e:
        bundle.verify_bootstrap(req, capsule_dir)
    assert "capsule/bootstrap.sh does not match the capsule manifest" in e.value.message


async def test_cached_blobs_are_reused_without_the_blob_service(blobs: BlobServer, tmp_path: pathlib.Path) -> None:
    req = launch_request(blobs, shell_capsule("echo cached\n", {"a.txt": b"A"}))
    capsule_dir, workspace_dir, cache_dir, _ = _dirs(tmp_path)
    await bundle.materialize(req, capsule_dir, workspace_dir, cache_dir)
    # Nothing listens on port 9: the one file fetched again is the attempt's own capsule.json,
    # which never enters the cache; everything else comes from the cache.
    req.blob_source.address = "127.0.0.1:9"
    with pytest.raises(errors.Unavailable) as err:
        await bundle.materialize(req, tmp_path / "c2", tmp_path / "w2", cache_dir)
    assert err.value.message.startswith("cannot fetch capsule/capsule.json ")
    kept = [f for f in req.capsule.files if f.path != "capsule.json"]
    del req.capsule.files[:]
    req.capsule.files.extend(kept)
    await bundle.materialize(req, tmp_path / "c3", tmp_path / "w3", cache_dir)
    assert (tmp_path / "w3" / "a.txt").read_bytes() == b"A"
    assert (tmp_path / "c3" / "bootstrap.sh").read_bytes() == b"echo cached\n"


async def test_an_attempts_own_capsule_json_never_enters_the_cache(blobs: BlobServer, tmp_path: pathlib.Path) -> None:
    cache_dir = tmp_path / "cache"
    for n in (1, 2, 3):
        req = launch_request(blobs, shell_capsule("true\n", {"a.txt": b"A"}), attempt_number=n)
        capsule_dir, workspace_dir = tmp_path / f"c{n}", tmp_path / f"w{n}"
        await bundle.materialize(req, capsule_dir, workspace_dir, cache_dir, share_cache=True)
        placed = capsule_dir / "capsule.json"
        digest = req.capsule.capsule_digest
        assert hashlib.sha256(placed.read_bytes()).hexdigest() == digest
        st = placed.lstat()
        # a read-only file of its own, owned by the executor: no link into the cache
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o444 and st.st_nlink == 1
        assert st.st_uid == os.geteuid()
        assert not bundle.cache_path(cache_dir, digest).exists()
        assert sorted(p.name for p in capsule_dir.iterdir()) == ["bootstrap.sh", "capsule.json"]
    # three attempts, one cache: the lab's file and bootstrap.sh (and its executable twin) only,
    # nothing per attempt
    boot = hashlib.sha256(b"true\n").hexdigest()
    entries = sorted(p.name for p in cache_dir.rglob("*") if p.is_file())
    assert entries == sorted([hashlib.sha256(b"A").hexdigest(), boot, boot + ".x"]), entries


async def test_an_own_capsule_json_that_does_not_match_is_refused_and_leaves_nothing(
    blobs: BlobServer, tmp_path: pathlib.Path
) -> None:
    # a capsule of this test alone: the store is shared with the other tests
    req = launch_request(blobs, shell_capsule(f"true # {os.urandom(8).hex()}\n"))
    blobs.store.path(req.capsule.capsule_digest).write_bytes(b'{"schema": "forged"}')
    capsule_dir, workspace_dir, cache_dir, _ = _dirs(tmp_path)
    with pytest.raises(errors.FailedPrecondition) as err:
        await bundle.materialize(req, capsule_dir, workspace_dir, cache_dir)
    assert err.value.message.startswith("capsule/capsule.json: the blob service sent content that does not match")
    assert not (capsule_dir / "capsule.json").exists()
    assert not [p for p in capsule_dir.iterdir() if p.name.endswith(".part")]


async def test_an_own_capsule_json_replaces_a_symlink_without_following_it(
    blobs: BlobServer, tmp_path: pathlib.Path
) -> None:
    outside = tmp_path / "outside.json"
    outside.write_bytes(b"untouched")
    req = launch_request(blobs, shell_capsule("true\n"))
    capsule_dir, workspace_dir, cache_dir, _ = _dirs(tmp_path)
    capsule_dir.mkdir()
    (capsule_dir / "capsule.json").symlink_to(outside)
    await bundle.materialize(req, capsule_dir, workspace_dir, cache_dir)
    assert not (capsule_dir / "capsule.json").is_symlink()
    assert hashlib.sha256((capsule_dir / "capsule.json").read_bytes()).hexdigest() == req.capsule.capsule_digest
    assert outside.read_bytes() == b"untouched"


async def test_content_not_matching_its_digest_is_refused_naming_the_file(
    blobs: BlobServer, tmp_path: pathlib.Path
) -> None:
    content = b"the real content " + os.urandom(8)
    req = launch_request(blobs, shell_capsule("true\n", {"data/weights.bin": content}))
    digest = hashlib.sha256(content).hexdigest()
    blobs.store.path(digest).write_bytes(b"tampered on the server")
    capsule_dir, workspace_dir, cache_dir, _ = _dirs(tmp_path)

    with pytest.raises(errors.FailedPrecondition) as err:
        await bundle.materialize(req, capsule_dir, workspace_dir, cache_dir)

    assert "workspace/data/weights.bin" in err.value.message
    assert digest in err.value.message
    assert not (cache_dir / digest[:2] / digest).exists()
    assert not list((cache_dir / "tmp").iterdir())


async def test_missing_blob_and_wrong_token_are_failed_preconditions(blobs: BlobServer, tmp_path: pathlib.Path) -> None:
    req = launch_request(blobs, shell_capsule("true\n"))
    absent = b"never uploaded " + os.urandom(8)
    req.spec.workspace.files.append(
        ws_pb.WorkspaceFile(path="absent.txt", sha256=hashlib.sha256(absent).hexdigest(), size=len(absent))
    )
    capsule_dir, workspace_dir, cache_dir, _ = _dirs(tmp_path)
    with pytest.raises(errors.FailedPrecondition, match=r"workspace/absent\.txt .*never uploaded"):
        await bundle.materialize(req, capsule_dir, workspace_dir, cache_dir)

    req = launch_request(blobs, shell_capsule("true\n", {"x": os.urandom(16)}))
    req.blob_source.token = "not-a-token"
    with pytest.raises(errors.FailedPrecondition, match="refused the attempt's run token"):
        await bundle.materialize(req, tmp_path / "c2", tmp_path / "w2", cache_dir)


@pytest.mark.parametrize("bad", ["../escape.txt", "/etc/passwd", "a/../../b", "a//b", "./a", "a\\b", ""])
async def test_paths_that_could_leave_their_root_are_refused(
    blobs: BlobServer, tmp_path: pathlib.Path, bad: str
) -> None:
    req = launch_request(blobs, shell_capsule("true\n"))
    req.spec.workspace.files.append(ws_pb.WorkspaceFile(path=bad, sha256=hashlib.sha256(b"x").hexdigest(), size=1))
    capsule_dir, workspace_dir, cache_dir, _ = _dirs(tmp_path)
    with pytest.raises(errors.InvalidArgument) as err:
        await bundle.materialize(req, capsule_dir, workspace_dir, cache_dir)
    assert err.value.field_violations[0].field.startswith("spec.workspace.files[")
    assert not capsule_dir.exists()  # refused before anything was fetched or written
    assert not (tmp_path / "escape.txt").exists()


async def test_a_symlink_in_the_destination_is_never_followed(blobs: BlobServer, tmp_path: pathlib.Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    capsule_dir, workspace_dir, cache_dir, _ = _dirs(tmp_path)
    workspace_dir.mkdir()
    (workspace_dir / "link").symlink_to(outside)
    req = launch_request(blobs, shell_capsule("true\n", {"link/pwned.txt": b"x"}))
    with pytest.raises(errors.InvalidArgument, match="symbolic link"):
        await bundle.materialize(req, capsule_dir, workspace_dir, cache_dir)
    assert list(outside.iterdir()) == []


async def test_bad_dataset_name_and_digest_are_invalid(blobs: BlobServer, tmp_path: pathlib.Path) -> None:
    req = launch_request(blobs, shell_capsule("true\n"))
    req.datasets.append(lr_pb.ResolvedDataset(name="../x", ref="a/b@1"))
    with pytest.raises(errors.InvalidArgument, match="dataset name"):
        await bundle.materialize(req, *_dirs(tmp_path))
    req = launch_request(blobs, shell_capsule("true\n"))
    req.capsule.files.append(ws_pb.WorkspaceFile(path="x", sha256="ABC", size=1))
    with pytest.raises(errors.InvalidArgument, match="not 64 lowercase hex"):
        await bundle.materialize(req, *_dirs(tmp_path))


async def test_many_files_fetch_concurrently_and_copy_across_devices(blobs: BlobServer, tmp_path: pathlib.Path) -> None:
    files = {f"f/{i:03d}.bin": os.urandom(1024 + i) for i in range(40)}
    req = launch_request(blobs, shell_capsule("true\n", files))
    shm = pathlib.Path("/dev/shm")
    other_device = shm.is_dir() and os.stat(shm).st_dev != os.stat(tmp_path).st_dev
    workspace_dir = (shm / f"sf-test-{os.getpid()}-{tmp_path.name}") if other_device else tmp_path / "ws"
    try:
        await bundle.materialize(req, tmp_path / "c", workspace_dir, tmp_path / "cache", concurrency=4)
        for path, data in files.items():
            assert (workspace_dir / path).read_bytes() == data
            assert stat.S_IMODE((workspace_dir / path).stat().st_mode) == 0o644
    finally:
        if other_device:
            shutil.rmtree(workspace_dir, ignore_errors=True)


def test_a_published_cache_entry_is_never_replaced(tmp_path: pathlib.Path) -> None:
    """Linux refuses to hard-link an inode whose last name was renamed over (ENOENT): a second
    fetch of the same blob must leave the first entry's inode in place for launches linking it."""
    target = bundle.cache_path(tmp_path, "ab" * 32)
    target.parent.mkdir(parents=True)
    first, second = tmp_path / "first", tmp_path / "second"
    first.write_bytes(b"same content")
    second.write_bytes(b"same content")
    bundle._publish(first, target)
    inode = target.stat().st_ino
    bundle._publish(second, target)  # a concurrent fetch that finished later
    assert target.stat().st_ino == inode == first.stat().st_ino
    os.link(target, tmp_path / "linked")  # what a launch placing the file does
    assert (tmp_path / "linked").read_bytes() == b"same content"


def _connections_to(address: str) -> set[int]:
    """The local ports of the established TCP connections to `address` (host:port) on this host
    (`/proc/net/tcp` and `tcp6`: gRPC's sockets may be IPv6 ones with IPv4-mapped addresses; the
    server is this test's own, so they are this process's channels)."""
    port = int(address.rsplit(":", 1)[1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in pathlib.Path(table).read_text().splitlines()[1:]:
            local, remote, state = line.split()[1:4]
            if state == "01" and int(remote.rsplit(":", 1)[1], 16) == port:  # 01: ESTABLISHED
                ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


async def test_launches_share_one_open_channel_to_the_blob_service(tmp_path: pathlib.Path) -> None:
    # a server of this test's own: no other test's connection to it can be open or pooled
    async with blob_server(tmp_path / "srv") as blobs:
        channels = BlobChannels()
        seen: list[set[int]] = []
        try:
            for n in (1, 2, 3):
                req = launch_request(blobs, shell_capsule(f"true # {n}\n", {"a.txt": os.urandom(8)}), attempt_number=n)
                await bundle.materialize(
                    req, tmp_path / f"c{n}", tmp_path / f"w{n}", tmp_path / "cache", channels=channels
                )
                assert (tmp_path / f"c{n}" / "bootstrap.sh").read_bytes() == f"true # {n}\n".encode()
                seen.append(_connections_to(blobs.address))
        finally:
            await channels.close()
        # one connection, opened by the first launch and still the one open after the third
        assert len(seen[0]) == 1 and seen == [seen[0]] * 3, seen
        await _until_no_connection_to(blobs.address)
        # without the executor's channels, a launch's own channel is closed when it is done
        req = launch_request(blobs, shell_capsule("true # own channel\n"))
        await bundle.materialize(req, tmp_path / "c4", tmp_path / "w4", tmp_path / "cache")
        await _until_no_connection_to(blobs.address)


async def _until_no_connection_to(address: str) -> None:
    """Wait for the connections of closed channels to go (gRPC closes their sockets after close)."""
    for _ in range(100):
        if not _connections_to(address):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"a connection to {address} stayed open after its channel was closed")


async def test_a_blob_service_found_unreachable_gets_a_new_channel_next_time(
    blobs: BlobServer, tmp_path: pathlib.Path
) -> None:
    channels = BlobChannels()
    try:
        req = launch_request(blobs, shell_capsule("true # unreachable\n"))
        req.blob_source.address = "127.0.0.1:9"  # nothing listens there
        first = channels.get("127.0.0.1:9", "")
        with pytest.raises(errors.Unavailable):
            await bundle.materialize(req, tmp_path / "c", tmp_path / "w", tmp_path / "cache", channels=channels)
        assert channels.get("127.0.0.1:9", "") is not first
        # a reachable service's channel is kept
        req = launch_request(blobs, shell_capsule("true # reachable\n"))
        kept = channels.get(blobs.address, "")
        await bundle.materialize(req, tmp_path / "c2", tmp_path / "w2", tmp_path / "cache", channels=channels)
        assert channels.get(blobs.address, "") is kept
    finally:
        await channels.close()


async def test_past_its_limit_the_least_recently_used_channel_is_retired() -> None:
    channels = BlobChannels(limit=2)
    a = channels.get("127.0.0.1:9", "")
    b = channels.get("127.0.0.1:10", "")
    assert channels.get("127.0.0.1:9", "") is a  # a is now the most recently used
    channels.get("127.0.0.1:11", "")
    assert channels.get("127.0.0.1:9", "") is a
    assert channels.get("127.0.0.1:10", "") is not b  # b was retired
    await asyncio.wait_for(channels.close(), 5.0)
