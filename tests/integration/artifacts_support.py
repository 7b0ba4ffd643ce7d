"""Shared by the artifact tests of every kind: a job that leaves known files in FORGE_OUT_DIR, and
the checks `sf job artifacts` / `sf job download` must pass against the out dir on disk."""

from __future__ import annotations

import hashlib
import json
import pathlib
from collections.abc import Awaitable, Callable
from typing import Any

# A 3 MiB + 5 bytes checkpoint (several 1 MiB chunks and a short last one), a small eval result,
# an empty file, a nested export, and a link the download must never follow.
WRITE_ARTIFACTS = """#!/usr/bin/env bash
set -eu
cd "$FORGE_OUT_DIR"
mkdir -p checkpoints/step-2 eval exports/hf/tok
head -c 3145733 /dev/urandom > checkpoints/step-2/model.bin
echo '{"accuracy": 0.75}' > eval/results.json
: > exports/empty.txt
echo tokenizer > exports/hf/tok/vocab.txt
ln -s /etc/passwd exports/passwd-link
echo wrote artifacts
"""

FILES = ("checkpoints/step-2/model.bin", "eval/results.json", "exports/empty.txt", "exports/hf/tok/vocab.txt")

Sf = Callable[..., Awaitable[Any]]


def sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def check_listing(sf: Sf, job_id: str, out_dir: pathlib.Path) -> dict[str, dict[str, Any]]:
    """`sf job artifacts -o json` lists exactly the job's files (size, sha256 of the bytes on the
    executor's disk) and the link as a link."""
    r = await sf("-o", "json", "job", "artifacts", job_id)
    listed = {a["path"]: a for a in json.loads(r.stdout)["artifacts"]}
    assert sorted(listed) == sorted([*FILES, "exports/passwd-link"]), listed
    for path in FILES:
        on_disk = out_dir / path
        assert listed[path]["kind"] == "file"
        assert listed[path]["size"] == on_disk.stat().st_size, path
        assert listed[path]["sha256"] == sha256(on_disk), path
    link = listed["exports/passwd-link"]
    assert (link["kind"], link["link_target"], link["size"], link["sha256"]) == ("symlink", "/etc/passwd", 0, "")
    lines = (await sf("job", "artifacts", job_id)).stdout.splitlines()
    model = listed[FILES[0]]
    assert f"{model['sha256']}  {model['size']}  {FILES[0]}" in lines, lines
    return listed


async def check_download(sf: Sf, job_id: str, out_dir: pathlib.Path, dest: pathlib.Path) -> None:
    """All, a directory prefix and one file; then a resumed download of an interrupted one."""
    r = await sf("-o", "json", "job", "download", job_id, "--to", str(dest / "all"))
    got = {f["path"]: f for f in json.loads(r.stdout)["files"]}
    assert sorted(got) == sorted(FILES)  # the link is not downloaded
    for path in FILES:
        assert (dest / "all" / path).read_bytes() == (out_dir / path).read_bytes(), path
    assert not (dest / "all" / "exports" / "passwd-link").exists()

    r = await sf("-o", "json", "job", "download", job_id, "exports", "--to", str(dest / "prefix"))
    assert sorted(f["path"] for f in json.loads(r.stdout)["files"]) == ["exports/empty.txt", "exports/hf/tok/vocab.txt"]
    r = await sf("job", "download", job_id, "eval/results.json", "--to", str(dest / "one"))
    assert (dest / "one" / "eval" / "results.json").read_text() == '{"accuracy": 0.75}\n'
    assert sorted(p.name for p in (dest / "one").rglob("*") if p.is_file()) == ["results.json"]

    # An interrupted download left the first 1.5 MiB in the .sfpart file: it continues from there.
    model = out_dir / FILES[0]
    part = dest / "resume" / "checkpoints" / "step-2" / "model.bin.sfpart"
    part.parent.mkdir(parents=True)
    part.write_bytes(model.read_bytes()[: 3 * 512 * 1024])
    r = await sf("-o", "json", "job", "download", job_id, FILES[0], "--to", str(dest / "resume"))
    (fetched,) = json.loads(r.stdout)["files"]
    assert (fetched["status"], fetched["resumed_from"]) == ("resumed", 3 * 512 * 1024)
    assert sha256(dest / "resume" / FILES[0]) == sha256(model)
    assert not part.exists()
    again = json.loads(
        (await sf("-o", "json", "job", "download", job_id, FILES[0], "--to", str(dest / "resume"))).stdout
    )
    assert again["files"][0]["status"] == "unchanged"

    # A partial file that is not a prefix of the artifact: the resumed result fails its sha256
    # check (proof that the download continued at the offset), is removed, and sf exits non-zero.
    bad = dest / "bad" / "checkpoints" / "step-2" / "model.bin.sfpart"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"\0" * 1000)
    r = await sf("job", "download", job_id, FILES[0], "--to", str(dest / "bad"), check=False)
    assert r.returncode == 1 and "does not match" in r.stderr, r.stderr
    assert not bad.exists() and not (dest / "bad" / FILES[0]).exists()
    await sf("job", "download", job_id, FILES[0], "--to", str(dest / "bad"))
    assert sha256(dest / "bad" / FILES[0]) == sha256(model)
