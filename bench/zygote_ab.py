"""The real pre-forked runner of this tree against an earlier one's: `python -m bench.zygote_ab --base REV`.

What one trivial attempt costs in the process that forks it, and nothing else of the row around
it (the console, the executor): each tree's capsule (the base's built in its worktree,
build/bench-ab/<rev>, as `python -m bench.ab` checks it out) is laid out per attempt as an
executor would, its runner venv installed once, and each tree's own zygote started from that
venv exactly as the executor starts it (`<venv>/bin/python -I <venv>/pex`,
``PEX_MODULE=sfrunner.zygote:serve``). Each attempt is a spec file and a line to that zygote; the
runner runs `true` against the capsule tests' IngestService and the attempt ends when its
`exit_code` is written. The figure is the growth of the zygote's `cutime + cstime` over a block of
attempts (every process of an attempt is reaped by the zygote or by a process it reaps), divided
by the block's size: /proc counts in clock ticks (10 ms), so single attempts are not measured.
Blocks alternate between the trees. No privilege drop (uid -1), as in bench/zygote_floor.py.
Prints each side's blocks and their medians (ms of CPU per attempt).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from bench import ab, zygote_floor

REPO = pathlib.Path(__file__).resolve().parents[1]
EXIT_TIMEOUT_S = 60.0


def _children_cpu(pid: int) -> float:
    """CPU seconds of the children `pid` has reaped (user + system)."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def _capsule(tree: pathlib.Path) -> pathlib.Path:
    """`tree`'s built capsule, built with that tree's own code when it is missing."""
    out = tree / "build" / "capsule"
    if not (out / "manifest.json").exists():
        env = dict(os.environ, PYTHONPATH=ab.tree_pythonpath(tree))
        subprocess.run([sys.executable, "-m", "capsule.build", "--out", str(out)], cwd=tree, env=env, check=True)
    return out


def _start(venv: str, specs: pathlib.Path) -> subprocess.Popen[str]:
    env = {"PEX_MODULE": "sfrunner.zygote:serve", "FORGE_ZYGOTE_SPECS": str(specs)}
    python, entry = os.path.join(venv, "bin", "python"), os.path.join(venv, "pex")
    proc = subprocess.Popen(
        [python, "-I", entry], env=env, cwd="/", stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        raise RuntimeError(f"the zygote of {venv} did not start")
    return proc


def _ended(root: pathlib.Path, pid: int) -> bool:
    """The attempt's exit code is written and the process that was forked for it is reaped."""
    return (root / "exit_code").exists() and not pathlib.Path(f"/proc/{pid}").exists()


async def _one(zygote: subprocess.Popen[str], specs: pathlib.Path, name: str, root: pathlib.Path, launch: Any) -> None:
    """One attempt through `zygote`, until its exit code is written and it is reaped."""
    assert zygote.stdin is not None
    assert zygote.stdout is not None
    (root / "log").touch()
    spec = {"root": str(root), "log": str(root / "log"), "cwd": str(launch.workspace_dir), "uid": -1, "env": launch.env}
    (specs / name).write_text(json.dumps(spec))
    zygote.stdin.write(f"{name}\n")
    zygote.stdin.flush()
    pid = int(zygote.stdout.readline())
    deadline = time.monotonic() + EXIT_TIMEOUT_S
    while not _ended(root, pid):
        if time.monotonic() > deadline:
            raise RuntimeError(f"attempt {name} did not end: {(root / 'log').read_text()[-2000:]}")
        await asyncio.sleep(0.005)
    code = (root / "exit_code").read_text().strip()
    if code != "0":
        raise RuntimeError(f"attempt {name} exited {code}: {(root / 'log').read_text()[-2000:]}")


async def _measure(trees: dict[str, pathlib.Path], blocks: int, size: int) -> dict[str, list[float]]:
    from capsule.layout import load_manifest
    from executor_svc.local.pex_warm import SharedPex

    manifests = {side: load_manifest(_capsule(tree)) for side, tree in trees.items()}
    work = pathlib.Path(tempfile.mkdtemp(prefix="sf-zygote-ab-"))
    os.chmod(work, 0o755)
    (work / "state").mkdir()
    shared = SharedPex(work / "state")
    zygotes: dict[str, tuple[subprocess.Popen[str], pathlib.Path]] = {}
    out: dict[str, list[float]] = {side: [] for side in trees}
    n = 0
    try:
        # a first block per side warms both (not counted), then `blocks` alternated blocks each
        for block in range(2 * blocks + 2):
            side = list(trees)[block % 2]
            before = 0.0
            for _ in range(size):
                ingest, launch, root = await zygote_floor._attempt(work, n, manifests[side], shared)
                n += 1
                try:
                    if side not in zygotes:
                        specs = work / f"specs-{side}"
                        specs.mkdir(mode=0o700)
                        zygotes[side] = (_start(launch.env["FORGE_PEX_VENV"], specs), specs)
                    zygote, specs = zygotes[side]
                    if not before:
                        before = _children_cpu(zygote.pid)
                    await _one(zygote, specs, f"a{n}", root, launch)
                finally:
                    await ingest.stop()
            if block >= 2:
                out[side].append((_children_cpu(zygotes[side][0].pid) - before) / size)
    finally:
        for zygote, _ in zygotes.values():
            assert zygote.stdin is not None
            zygote.stdin.close()
            zygote.wait(30)
        shutil.rmtree(work, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.zygote_ab", description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the earlier revision (a commit, tag or branch)")
    parser.add_argument("--blocks", type=int, default=6, help="alternated blocks per side (default 6)")
    parser.add_argument("--size", type=int, default=10, help="attempts per block (default 10)")
    args = parser.parse_args(argv)
    if args.blocks < 1 or args.size < 1:
        parser.error("--blocks and --size must be at least 1")
    out = asyncio.run(_measure({"this": REPO, "base": ab.base_tree(args.base, parser.prog)}, args.blocks, args.size))
    for side, blocks in out.items():
        print(
            f"{side}: CPU per attempt by block of {args.size}: {', '.join(f'{b * 1000:.1f}' for b in blocks)} ms; "
            f"median {statistics.median(blocks) * 1000:.1f} ms"
        )
    print(f"1-minute load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
