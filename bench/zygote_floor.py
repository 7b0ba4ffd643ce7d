"""The CPU floor of a trivial attempt with a pre-forked runner: `python -m bench.zygote_floor [--starts N]`.

The floor of the design the process runtime now has with job uids (the pre-forked runner,
executor_svc/local/zygote.py; docs/benchmarks.md, **throughput**): what an attempt of `true` costs
when the runner is not started afresh (two interpreter starts and the runner's imports) but forked
from a warm process per node. Like bench/capsule_cpu.py, this tree's capsule is laid out as an
executor would and its runner venv installed once; then one "zygote" is started from that venv's
Python with what the real zygote preloads (`sfrunner.zygote.preload`: the runner, its ingest
sender, the adapters, the messages' descriptions), and for each attempt it forks a child that
hashes the capsule's listed files (what bootstrap's integrity check reads), takes the attempt's
environment and runs the runner's `main` against the capsule tests' IngestService, exactly as a
started runner would, with train.sh `true`. Per attempt: the CPU of that child and everything it
waited for (the zygote's RUSAGE_CHILDREN). The same attempts through `sh bootstrap.sh` are
measured alternately for comparison. Prints the medians.
No privilege drop (the real one adds it, and its zygote writes the exit code): a floor, not a runtime.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[1]
TRAIN_SH = "#!/usr/bin/env bash\ntrue\n"
PATH = "/usr/bin:/bin"
ZYGOTE = r"""
import hashlib, json, os, resource, sys
from sfrunner import zygote
zygote.preload()  # what the real zygote imports and describes before it forks
from sfrunner import main as runner
print("ready", flush=True)
for line in sys.stdin:
    job = json.loads(line)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    pid = os.fork()
    if pid == 0:
        os.setsid()
        env = job["env"]
        with open(os.path.join(env["FORGE_CAPSULE_DIR"], "capsule.json"), "rb") as f:
            doc = json.loads(f.read())
        roots = {"capsule": env["FORGE_CAPSULE_DIR"], "workspace": env["FORGE_WORKSPACE_DIR"]}
        for entry in doc["files"]:
            with open(os.path.join(roots[entry["root"]], entry["path"]), "rb") as f:
                hashlib.sha256(f.read()).hexdigest()
        log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.chdir(env["FORGE_WORKSPACE_DIR"])
        os.environ.clear()
        os.environ.update(env)
        code = runner.main(env)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    print(json.dumps({"status": status, "cpu": cpu}), flush=True)
"""


def _start_zygote(venv: str) -> subprocess.Popen[str]:
    python = os.path.join(venv, "bin", "python")
    zygote = subprocess.Popen([python, "-I", "-c", ZYGOTE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert zygote.stdout is not None
    if zygote.stdout.readline().strip() != "ready":
        raise RuntimeError("the zygote did not start")
    return zygote


def _send(zygote: subprocess.Popen[str], job: dict[str, Any]) -> None:
    assert zygote.stdin is not None
    zygote.stdin.write(json.dumps(job) + "\n")
    zygote.stdin.flush()


async def _attempt(work: pathlib.Path, i: int, manifest: dict[str, Any], shared: Any) -> tuple[Any, Any, Any]:
    from tests.integration.capsule.fake_ingest import FakeIngest
    from tests.integration.capsule.harness import TOKEN, TOKEN_FILE, lay_out

    ingest = FakeIngest(token=TOKEN, attempt_id="jtest0000000001.1")
    await ingest.start()
    root = work / f"attempt-{i}"
    os.mkdir(root)
    launch = lay_out(root, manifest, {"experiments/demo/train.sh": TRAIN_SH}, ingest_addr=ingest.address)
    launch.env.update(PATH=PATH, PEX_ROOT=str(launch.scratch_dir / ".pex"))
    launch.env.update(await shared.env_for(launch.capsule_dir, {"PATH": PATH}, {}))
    token = launch.scratch_dir / TOKEN_FILE
    token.write_text(TOKEN)
    token.chmod(0o600)
    return ingest, launch, root


async def _measure(starts: int) -> dict[str, float]:
    from capsule.layout import load_manifest
    from executor_svc.local.pex_warm import SharedPex
    from tests.integration.capsule.harness import run_capsule

    manifest = load_manifest(REPO / "build" / "capsule")
    work = pathlib.Path(tempfile.mkdtemp(prefix="sf-zygote-floor-"))
    os.chmod(work, 0o755)
    zygote: subprocess.Popen[str] | None = None
    forked: list[float] = []
    started: list[float] = []
    try:
        os.mkdir(work / "state")
        shared = SharedPex(work / "state")
        for i in range(2 * starts + 2):
            ingest, launch, root = await _attempt(work, i, manifest, shared)
            try:
                if i % 2 == 0:  # a started runner: sh bootstrap.sh, as the executor runs it
                    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                    result = await run_capsule(launch)
                    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                    if result.returncode != 0:
                        raise RuntimeError(f"bootstrap.sh exited {result.returncode}: {result.stderr[-2000:]}")
                    if i:
                        started.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
                    continue
                if zygote is None:
                    zygote = await asyncio.to_thread(_start_zygote, launch.env["FORGE_PEX_VENV"])
                await asyncio.to_thread(_send, zygote, {"env": launch.env, "log": str(root / "log")})
                assert zygote.stdout is not None
                line = await asyncio.to_thread(zygote.stdout.readline)
                out = json.loads(line)
                if out["status"] != 0:
                    raise RuntimeError(f"the forked runner ended {out['status']}: {(root / 'log').read_text()[-2000:]}")
                if i > 1:
                    forked.append(float(out["cpu"]))
            finally:
                await ingest.stop()
        return {
            "forked_cpu_s": statistics.median(forked),
            "started_cpu_s": statistics.median(started),
            "load": os.getloadavg()[0],
        }
    finally:
        if zygote is not None:
            assert zygote.stdin is not None
            zygote.stdin.close()
            zygote.wait(30)
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.zygote_floor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=10)
    args = parser.parse_args(argv)
    out = asyncio.run(_measure(args.starts))
    print(
        f"CPU per trivial attempt: forked from a warm runner {out['forked_cpu_s']:.3f} s, "
        f"started by sh bootstrap.sh {out['started_cpu_s']:.3f} s "
        f"(medians of {args.starts} each, alternated; 1-minute load {out['load']:.1f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
