"""A warm, read-only runner venv for jobs that run as uids of their own (process runtime).

runner.pex is built in pex's venv mode: its first start on a node installs a venv under PEX_ROOT
(seconds: unzip, venv creation, wheel installs), later starts find it and exec it at once. A
PEX_ROOT shared between jobs of different uids would be code one job could change for the next,
so each such attempt got a fresh PEX_ROOT in its scratch directory, and every attempt paid the
whole install (~4 s of the capsule's start-up).

Here the executor (root) installs the venv once per node, runner and interpreter into
`<state>/pex-shared`, owned by root and read-only to every other uid, with its bytecode compiled,
and names it to the attempt: `FORGE_PEX_VENV` (the venv directory), `FORGE_PEX_RUNNER` (the
runner file it was installed from) and `FORGE_PEX_PYTHON` (the interpreter it was built for).
bootstrap.sh, after its integrity check and in the same interpreter, execs that venv's own entry
directly (no pex bootstrap, no second interpreter start just to find it), but only for that very
runner and interpreter and only when root alone can change it; otherwise the pex builds its own
venv in the attempt's PEX_ROOT, as before. The pex is installed only when its content matches
the digest its name carries.

The interpreter is the one bootstrap.sh would find on the executor's own PATH. Nothing the job
chooses is run as root: an attempt whose request sets PATH or FORGE_PYTHON gets no shared venv,
and the interpreter (and every directory above it) must be root-owned and not writable by others.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import stat
import subprocess
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger("starforge.executor.local.pex_warm")

SHARED_DIR = "pex-shared"
WARM_TIMEOUT_S = 300.0
# What bootstrap.sh reads: the venv, the runner it was installed from, the interpreter it was built for.
ENV_VENV = "FORGE_PEX_VENV"
ENV_RUNNER = "FORGE_PEX_RUNNER"
ENV_PYTHON = "FORGE_PEX_PYTHON"
ENV_KEYS = (ENV_VENV, ENV_RUNNER, ENV_PYTHON)
RUNNER_NAME = re.compile(r"runner-([0-9a-f]{16})\.pex")
# Run by the interpreter pex execs into: where the venv is (its sys.prefix).
INSTALL_PROGRAM = "import sys, sfrunner.main; sys.stdout.write(sys.prefix)"


def _safe_for_root(path: Path) -> bool:
    """Root-owned, not writable by group or others: the file and every directory above it."""
    try:
        for p in (path, *path.parents):
            st = p.stat()
            if st.st_uid != 0 or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                return False
    except OSError:
        return False
    return True


def _runs_for_others(path: Path) -> bool:
    """Executable by a uid that is neither its owner nor in its group (what `command -v` run by a
    job's uid accepts): the file, its target and every directory above both are o+x."""
    try:
        real = path.resolve(strict=True)
        if not real.is_file() or not real.stat().st_mode & stat.S_IXOTH:
            return False
        return all(d.stat().st_mode & stat.S_IXOTH for d in (*path.parent.parents, path.parent, *real.parents))
    except OSError:
        return False


def job_python(env: Mapping[str, str], request_env: Mapping[str, str]) -> str | None:
    """The interpreter bootstrap.sh will pick for a job running as another uid (`command -v
    python3 || command -v python` on PATH), when the executor, not the job, decides it and it is
    safe to run as root; else None."""
    if "PATH" in request_env or "FORGE_PYTHON" in env:
        return None
    for name in ("python3", "python"):
        for d in env.get("PATH", "").split(":"):
            if not d.startswith("/"):
                continue
            candidate = Path(d) / name
            if _runs_for_others(candidate):
                return str(candidate) if _safe_for_root(candidate.resolve()) else None
    return None


class SharedPex:
    """Installs runner venvs into `<state_dir>/pex-shared`, once per (runner, interpreter)."""

    def __init__(self, state_dir: Path) -> None:
        self.root = state_dir / SHARED_DIR
        self._ready: dict[tuple[str, str], str | None] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    async def env_for(
        self, capsule_dir: Path, env: Mapping[str, str], request_env: Mapping[str, str]
    ) -> dict[str, str]:
        """The variables that let bootstrap.sh use the shared venv ({} when there is none)."""
        python = job_python(env, request_env)
        if python is None:
            return {}
        try:
            runner = json.loads((capsule_dir / "capsule.json").read_text())["runner"]
        except (OSError, ValueError, KeyError, TypeError):
            return {}
        if not isinstance(runner, str) or RUNNER_NAME.fullmatch(runner) is None:
            return {}
        venv = await self._venv(capsule_dir / runner, python, env)
        if venv is None:
            return {}
        return {ENV_VENV: venv, ENV_RUNNER: runner, ENV_PYTHON: python}

    async def warm(self, capsule_dir: Path, env: Mapping[str, str]) -> str | None:
        """Install, before any attempt asks, the venv that an attempt of the capsule in
        `capsule_dir` (its `manifest.json`, as capsule.build writes it) will get from `env_for`
        with this environment and no variables of its own; the venv's directory, or None.

        The same (runner, interpreter) key and lock as `env_for`: an attempt that comes while
        this runs waits for this install instead of starting another."""
        python = job_python(env, {})
        if python is None:
            log.warning("no shared runner venv to warm: no interpreter on PATH that is safe to run as root")
            return None
        try:
            runner = json.loads((capsule_dir / "manifest.json").read_text())["runner"]["path"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("no shared runner venv to warm: %s/manifest.json names no runner (%s)", capsule_dir, exc)
            return None
        if not isinstance(runner, str) or RUNNER_NAME.fullmatch(runner) is None:
            log.warning("no shared runner venv to warm: %s/manifest.json names %r", capsule_dir, runner)
            return None
        # a warm-up that failed is not remembered: the first attempt tries again from its own copy
        return await self._venv(capsule_dir / runner, python, env, keep_failure=False)

    async def _venv(self, pex: Path, python: str, env: Mapping[str, str], *, keep_failure: bool = True) -> str | None:
        """The venv of (`pex`'s name, `python`), installed from `pex` on first use; a failure is
        remembered (`keep_failure`): later attempts start without a shared venv, as before."""
        key = (pex.name, python)
        async with self._locks.setdefault(key, asyncio.Lock()):
            if key not in self._ready:
                venv = await asyncio.to_thread(self._install, pex, python, env)
                if venv is None and not keep_failure:
                    return None
                self._ready[key] = venv
        return self._ready[key]

    def _install(self, pex: Path, python: str, env: Mapping[str, str]) -> str | None:
        """The installed venv's directory, or None."""
        if not _named_by_its_digest(pex):
            log.warning("%s does not match the digest in its name: no shared runner venv", pex)
            return None
        self.root.mkdir(mode=0o755, exist_ok=True)
        st = self.root.lstat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            log.warning("%s is not a directory of this executor's user: no shared runner venv", self.root)
            return None
        os.chmod(self.root, 0o755)  # noqa: S103 - jobs' uids read and run the venv; only we write it
        run_env = {"PATH": env.get("PATH", ""), "PEX_ROOT": str(self.root), "HOME": str(self.root)}
        install = [python, "-I", str(pex), "-c", INSTALL_PROGRAM]  # the venv a job's start would make
        prefix = self._run(install, {**run_env, "PEX_INTERPRETER": "1"}, pex.name, python)
        venv = Path(prefix or "/nonexistent")
        if not venv.is_relative_to(self.root) or not (venv / "pex").is_file():
            log.warning("shared runner venv for %s with %s: no venv under %s (%r)", pex.name, python, self.root, prefix)
            return None
        # The venv's own start appends to its `.last-access` (pex's cache pruning reads its time):
        # a job's uid may not write here, and a file every job could write would be a channel
        # between them. /dev/null takes the append from anybody and keeps nothing.
        for stamp in (self.root / "venvs").glob("*/*/*/.last-access"):
            if not stamp.is_symlink():
                stamp.unlink()
                stamp.symlink_to("/dev/null")
        # bytecode for every module (a job's uid cannot write __pycache__ here); a miss only costs time
        dirs = [str(self.root / d) for d in ("venvs", "installed_wheels")]
        self._run([python, "-I", "-m", "compileall", "-q", *dirs], run_env, pex.name, python)
        log.info("shared runner venv for %s with %s ready in %s", pex.name, python, venv)
        return str(venv)

    @staticmethod
    def _run(argv: list[str], env: dict[str, str], runner: str, python: str) -> str | None:
        """The command's stdout, or None when it failed."""
        try:
            r = subprocess.run(
                argv, env=env, capture_output=True, text=True, timeout=WARM_TIMEOUT_S, umask=0o022, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("shared runner venv for %s with %s: %s failed: %s", runner, python, argv[2], exc)
            return None
        if r.returncode != 0:
            tail = (r.stdout + r.stderr)[-2000:]
            what = argv[2]
            log.warning("shared runner venv for %s with %s: %s exited %d: %s", runner, python, what, r.returncode, tail)
            return None
        return r.stdout


def _named_by_its_digest(pex: Path) -> bool:
    """runner-<sha16>.pex whose content has that sha256 prefix: root runs it to install the venv."""
    match = RUNNER_NAME.fullmatch(pex.name)
    if match is None:
        return False
    h = hashlib.sha256()
    try:
        with pex.open("rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    except OSError:
        return False
    return h.hexdigest()[:16] == match.group(1)
