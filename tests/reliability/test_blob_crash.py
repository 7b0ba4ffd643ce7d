"""The control plane is SIGKILLed in the middle of a lab's first upload, while it writes the lab's
small files into blob packs. Afterwards every blob it serves is whole and is what its digest says
(a pack whose index was not published is not served), and the same `sf submit` then completes,
uploading what was lost, and its job runs from the packs."""

from __future__ import annotations

import hashlib
import os
import pathlib
import subprocess
import sys
import time

import pytest

from control.blobpacks import ENTRY, MAGIC
from control.blobstore import BlobStore
from tests.integration.console import executor_yaml, git, start_executor_process
from tests.reliability.harness import ControlProcess, terminate

FILES = 1200
FILE_BYTES = 64 << 10  # ~77 MB in all: ten batches of 8 MiB, so the kill lands with most still to come
SF = pathlib.Path(sys.executable).parent / "sf"


def _lab(root: pathlib.Path, env: dict[str, str]) -> dict[str, str]:
    """A committed lab of FILES small files; path -> sha256 of each."""
    subprocess.run([str(SF), "init", str(root), "--name", "lab"], env=env, check=True, capture_output=True)
    git(root, "init", "-q")
    subprocess.run(
        [str(SF), "new", "exp", "--method", "custom/custom"], cwd=root, env=env, check=True, capture_output=True
    )
    (root / "experiments" / "exp" / "config.yaml").write_text("image: host\nobservability: platform\n")
    digests = {}
    (root / "data").mkdir()
    for i in range(FILES):
        data = os.urandom(FILE_BYTES // 2).hex().encode()
        (root / "data" / f"{i:05d}.txt").write_bytes(data)
        digests[f"data/{i:05d}.txt"] = hashlib.sha256(data).hexdigest()
    git(root, "add", "-A")
    git(root, "commit", "-qm", "lab")
    return digests


def _published_entries(packs: pathlib.Path) -> list[tuple[pathlib.Path, str, int, int]]:
    """Every (pack, digest, offset, size) the indexes in `packs` publish."""
    out: list[tuple[pathlib.Path, str, int, int]] = []
    for index in sorted(packs.glob("*.idx")):
        body = index.read_bytes()
        assert body.startswith(MAGIC), index
        pack = index.with_suffix(".pack")
        out.extend((pack, raw.hex(), offset, size) for raw, offset, size in ENTRY.iter_unpack(body[len(MAGIC) :]))
    return out


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sigkill_during_an_upload_serves_only_whole_blobs_and_the_submit_completes(tmp_path: pathlib.Path) -> None:
    executor, executor_address = start_executor_process(
        tmp_path, executor_yaml(tmp_path, "process", {"inventory": [{"series": "cpu", "gpus": 0, "slots": 2}]})
    )
    control = ControlProcess(tmp_path, executor_address)
    blobs = tmp_path / "console" / "blobs"
    try:
        control.start()
        env = dict(
            os.environ,
            STARFORGE_CONSOLE=control.address,
            STARFORGE_TOKEN=control.token,
            STARFORGE_CLIENT_CONFIG=str(tmp_path / "client.yaml"),
        )
        lab = tmp_path / "lab"
        digests = _lab(lab, env)
        submit = subprocess.Popen(
            [str(SF), "submit", "exp", "-o", "json"], cwd=lab, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + 120
        while not list((blobs / "packs").glob("*.idx")):  # the first pack published: kill now
            assert submit.poll() is None, "the upload ended before a pack was published"
            assert time.monotonic() < deadline, "no pack was published"
            time.sleep(0.002)
        control.kill()
        submit.communicate(timeout=120)
        assert submit.returncode != 0, "the console was killed after the whole upload: nothing was interrupted"

        published = _published_entries(blobs / "packs")
        assert 0 < len(published) < FILES, len(published)
        for pack, digest, offset, size in published:
            with pack.open("rb") as f:
                f.seek(offset)
                assert hashlib.sha256(f.read(size)).hexdigest() == digest, (pack, digest)

        control.start()
        # the same submit completes, and its job runs: the executor fetched the workspace (packed
        # blobs included, each digest checked) and train.sh ran; --follow exits with the job's outcome
        again = subprocess.run(
            [str(SF), "submit", "exp", "--follow"], cwd=lab, env=env, capture_output=True, text=True, timeout=300
        )
        assert again.returncode == 0, again.stdout + again.stderr
        store = BlobStore(blobs)
        assert store.missing(sorted(set(digests.values()))) == []
        for path, digest in digests.items():
            assert hashlib.sha256(store.read_bytes(digest)).hexdigest() == digest, path
    finally:
        control.stop()
        terminate(executor)
