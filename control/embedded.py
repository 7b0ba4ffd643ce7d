"""The embedded console behind `sf up`: the control plane plus a local executor service.

Everything lives under one state directory:

    console.yaml        control plane settings (written with defaults on first start; edit freely)
    executor.yaml       the local executor's settings (same)
    ledger.db, blobs/   the ledger (SQLite, WAL) and the blob store
    executor/           attempts, blob cache and FORGE_OUT_DIR of every job
    admin-token         the first admin's personal access token (0600)
    secrets.key         the key user and project secrets are sealed with (0600; keep it with ledger.db)
    console.log, executor.log

Run as root with the process runtime, jobs run as uids of their own (`job_uid_range` in
executor.yaml) when the directories above the state dir let other users pass (o+x); the state
dir is then 0711 and everything in it but `executor/` is the console's alone (0600/0700), so a
job can reach its own attempt's files and nothing of the console. Otherwise every job runs as
the console's user, and the executor warns that it must serve one trusted user only.

The executor runs as its own process (as in a deployment) and is stopped by its PID when the
console stops. Jobs of the process runtime run in their own sessions and are not killed by a
console restart; the console reconciles with them when it comes back.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import getpass
import json
import logging
import os
import pathlib
import re
import secrets
import signal
import subprocess
import sys
import time

import yaml

from common.config import ConfigError, load_config
from common.server import serve_until_signal
from common.source import checkout
from control import bundled, envoy
from control.app import start_control
from control.config import ControlConfig, FleetConfig, InventoryConfig
from control.secrets import create_key_file

log = logging.getLogger("starforge.embedded")
# The source checkout this runs from (None when installed from a wheel): only there is the capsule
# built at start; an installed StarForge ships it prebuilt (control/bundled.py).
REPO = checkout()
CAPSULE_DIR = REPO / bundled.DEV_CAPSULE_DIR if REPO is not None else None
RUNTIMES = ("process", "docker")
# The local fleet's CPU slots (jobs at once) when executor.yaml names none: one per core, at least
# 4 (a job that waits on I/O or the network leaves its core to others). executor.yaml's `slots` of
# the cpu series is the setting; the console's view of the fleet follows it.
MIN_CPU_SLOTS = 4
# Uids the embedded executor runs jobs as, when it runs as root (see the module docstring).
JOB_UID_RANGE = [200000, 265535]

CONSOLE_DEFAULTS = """\
# StarForge embedded console settings (see docs/configuration.md). Edit and restart `sf up`.
# Registries or repository paths images may come from (registry.local, registry.local/team).
# "host" (no container: this machine's own Python) needs no entry. The one fleet, local, declares
# the host runtime when `sf up` runs jobs as processes: a job that names no image runs that way,
# and `sf job status` says so. Framework defaults: default_images: {custom: registry.local/img:1}.
image_allowlist: []
# Check --model / HF dataset ids against the Hub at submit; this machine may have no internet.
hf_precheck: false
scheduler_interval_seconds: 0.2
reconcile_interval_seconds: 1.0
"""


def admin_name() -> str:
    """The local user's name made valid as a StarForge user name ("admin" if nothing fits)."""
    try:
        raw = getpass.getuser()
    except (KeyError, OSError):
        raw = ""
    name = re.sub(r"[^a-z0-9-]", "-", raw.lower()).strip("-")[:32]
    if not re.match(r"^[a-z][a-z0-9-]{1,31}$", name):
        name = "admin"
    return name


def _write_default(path: pathlib.Path, text: str) -> None:
    if not path.exists():
        path.write_text(text)


def default_cpu_slots() -> int:
    """CPU slots of a new executor.yaml: this node's cores, at least MIN_CPU_SLOTS."""
    return max(MIN_CPU_SLOTS, os.cpu_count() or 1)


def local_cpu_slots(state_dir: pathlib.Path) -> int:
    """The cpu series' `slots` in executor.yaml (what the executor enforces), else the default."""
    try:
        doc = yaml.safe_load((state_dir / "executor.yaml").read_text()) or {}
        inventory = doc.get("local", {}).get("inventory", [])
        slots = next(e.get("slots") for e in inventory if isinstance(e, dict) and e.get("series") == "cpu")
    except (OSError, yaml.YAMLError, AttributeError, StopIteration):
        return default_cpu_slots()
    return slots if isinstance(slots, int) and not isinstance(slots, bool) and slots > 0 else default_cpu_slots()


def executor_config(state_dir: pathlib.Path, runtime: str) -> pathlib.Path:
    path = state_dir / "executor.yaml"
    doc: dict[str, dict[str, object]] = {
        "local": {
            "runtime": runtime,
            "state_dir": str(state_dir / "executor"),
            "inventory": [{"series": "cpu", "gpus": 0, "slots": default_cpu_slots()}],
        }
    }
    if runtime == "process" and can_isolate(state_dir):
        doc["local"]["job_uid_range"] = JOB_UID_RANGE
        # the capsule the console ships: its runner is ready before the first job asks for it
        doc["local"]["warm_capsule"] = str(ensure_capsule())
    if runtime == "docker" and os.environ.get("DOCKER_HOST"):
        doc["local"]["docker"] = {"base_url": os.environ["DOCKER_HOST"]}
    if path.exists():
        current = yaml.safe_load(path.read_text()) or {}
        if current.get("local", {}).get("runtime") == runtime:
            return path
    path.write_text("# Local executor of the embedded console (written by `sf up`).\n" + yaml.safe_dump(doc))
    return path


def can_isolate(state_dir: pathlib.Path) -> bool:
    """Root, and every directory above the state dir lets other users pass (jobs' uids must)."""
    if os.geteuid() != 0:
        return False
    return all(p.stat().st_mode & 0o001 for p in state_dir.resolve().parents)


def let_jobs_pass(state_dir: pathlib.Path) -> None:
    """0711 before the executor starts (it checks that jobs' uids can reach its state dir)."""
    if can_isolate(state_dir):
        state_dir.chmod(0o711)


def make_private(state_dir: pathlib.Path) -> None:
    """The console's files are its alone; jobs may only pass through to `executor/`."""
    for entry in state_dir.iterdir():
        if entry.name != "executor" and not entry.is_symlink():
            entry.chmod(0o700 if entry.is_dir() else 0o600)
    os.umask(0o077)  # what the console writes from now on


_built: list[pathlib.Path] = []


def ensure_capsule() -> pathlib.Path:
    """The capsule jobs get. Installed from a wheel: the one it ships (built by `make dist`). In a
    source checkout: runner.pex built for this checkout (`make capsule` does the same); the build
    is a quick no-op when the runner's sources are unchanged, so a stale runner.pex never ships;
    once per process."""
    packaged = bundled.packaged_capsule()
    if packaged is not None:
        return packaged
    if REPO is None or CAPSULE_DIR is None:
        raise ConfigError(
            "this StarForge installation has no capsule (control/assets/capsule is missing) and is not "
            "a source checkout to build one in; install a wheel made by `make dist`"
        )
    if not _built:
        log.info("building the capsule (runner.pex) into %s", CAPSULE_DIR)
        subprocess.run(
            [sys.executable, "-m", "capsule.build", "--out", str(CAPSULE_DIR)],
            check=True,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
        )
        _built.append(CAPSULE_DIR)
    return CAPSULE_DIR


def start_executor(
    state_dir: pathlib.Path, runtime: str, token: str, timeout: float = 60.0
) -> tuple[subprocess.Popen[bytes], str]:
    """Start the local executor service requiring `token` (passed in its environment, never
    written to disk: each `sf up` makes a new one); returns (process, address)."""
    ready = state_dir / "executor.ready"
    ready.unlink(missing_ok=True)
    logf = (state_dir / "executor.log").open("ab")
    proc = subprocess.Popen(
        [
            sys.executable,
            # installed: only the interpreter's packages (-P: not even the cwd); a checkout runs its own
            *(() if REPO is not None else ("-P",)),
            "-m",
            "executor_svc.main",
            "--kind",
            "local",
            "--config",
            str(executor_config(state_dir, runtime)),
            "--listen",
            "127.0.0.1:0",
            "--ready-file",
            str(ready),
        ],
        stdout=logf,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        # `python -m` puts its cwd first on sys.path (unless -P): the checkout, as always; installed,
        # the console's own private state dir, never wherever `sf up` happened to be run.
        cwd=REPO if REPO is not None else state_dir,
        env={**os.environ, "STARFORGE_EXECUTOR_TOKEN": token},
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready.exists():
            try:
                return proc, str(json.loads(ready.read_text())["address"])
            except (json.JSONDecodeError, KeyError):
                pass
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    stop_process(proc)
    tail = (state_dir / "executor.log").read_text(errors="replace").splitlines()[-15:]
    raise ConfigError("the local executor did not start:\n  " + "\n  ".join(tail))


def stop_process(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """SIGTERM the process we started (by PID), SIGKILL after `grace`."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def default_ui_listen(listen: str) -> str:
    """The web console's address for a console on `listen`: the same host, port + 10 (7070 -> 7080)."""
    host, _, port = listen.rpartition(":")
    return f"{host}:{int(port) + 10}" if port.isdigit() and int(port) else ""


def _can_serve_ui(cfg: ControlConfig, ui_listen: str) -> bool:
    """The web console needs its built files and envoy (an extra of an installed StarForge)."""
    if not ui_listen or not (cfg.ui_dir / "index.html").exists():
        return False
    if not envoy.installed():
        log.warning("no web console: envoy is not installed (pip install 'starforge[ui]')")
        return False
    return True


def console_config(
    state_dir: pathlib.Path,
    listen: str,
    executor_address: str,
    ui_listen: str = "",
    executor_token: str = "",
    runtime: str = "process",
) -> ControlConfig:
    """console.yaml plus the one fleet, `local`; with the process runtime it declares the host
    runtime (its jobs run without a container), with docker it runs images."""
    path = state_dir / "console.yaml"
    _write_default(path, CONSOLE_DEFAULTS)
    cfg = load_config(ControlConfig, path, {})
    key_file = cfg.secrets_key_file or state_dir / "secrets.key"
    if create_key_file(key_file.expanduser()):
        log.info("created the secrets key %s", key_file)
    cfg = dataclasses.replace(
        cfg,
        secrets_key_file=key_file,
        listen=listen,
        state_dir=state_dir,
        ui_listen=ui_listen if _can_serve_ui(cfg, ui_listen) else "",
        capsule_dir=ensure_capsule(),
        bootstrap_admin=cfg.bootstrap_admin or admin_name(),
        fleets=[
            FleetConfig(
                name="local",
                kind="local",
                address=executor_address,
                inventory=[InventoryConfig(series="cpu", nodes=1, gpus_per_node=0, slots=local_cpu_slots(state_dir))],
                token=executor_token,
                host_runtime=runtime == "process",
            )
        ],
    )
    cfg.validate()
    return cfg


async def _serve(cfg: ControlConfig, ready_file: pathlib.Path | None) -> None:
    app = await start_control(cfg)
    if ready_file is not None:
        tmp = ready_file.with_suffix(".tmp")
        tmp.write_text(
            json.dumps(
                {
                    "address": app.address,
                    "ingest_address": app.ctx.public_ingest_address,
                    "user": cfg.bootstrap_admin,
                    "token_file": str(cfg.resolved_state_dir / "admin-token"),
                    "ui": app.ui_url,
                    "pid": os.getpid(),
                }
            )
        )
        tmp.replace(ready_file)

    async def on_stop() -> None:
        app.stop_event.set()

    await serve_until_signal(app.server, grace=3.0, on_stop=on_stop)
    await app.stop(0)


def run_embedded(
    state_dir: pathlib.Path,
    listen: str = "127.0.0.1:7070",
    *,
    runtime: str = "process",
    ready_file: pathlib.Path | None = None,
    ui_listen: str | None = None,
) -> int:
    """Run the embedded console until SIGTERM/SIGINT. Returns an exit code."""
    if runtime not in RUNTIMES:
        raise ConfigError(f"unknown runtime {runtime!r}; use one of {', '.join(RUNTIMES)}")
    state_dir = state_dir.expanduser().resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    let_jobs_pass(state_dir)
    # The executor runs attempts for whoever can call it: it gets a random token of its own that
    # only this control plane knows, even on loopback (other local users share 127.0.0.1).
    executor_token = secrets.token_urlsafe(32)
    proc, address = start_executor(state_dir, runtime, executor_token)
    make_private(state_dir)  # after the executor started: its own files keep their modes
    try:
        ui = default_ui_listen(listen) if ui_listen is None else ui_listen
        cfg = console_config(state_dir, listen, address, ui, executor_token, runtime)
        asyncio.run(_serve(cfg, ready_file))
    finally:
        stop_process(proc)
        if ready_file is not None:
            ready_file.unlink(missing_ok=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """The console process `sf up` starts: `--state-dir DIR --listen ADDR --runtime R [--ready-file F]`."""
    parser = argparse.ArgumentParser(prog="sf up", description="Run the embedded StarForge console.")
    parser.add_argument("--state-dir", required=True, type=pathlib.Path)
    parser.add_argument("--listen", default="127.0.0.1:7070")
    parser.add_argument("--runtime", default="process", choices=RUNTIMES)
    parser.add_argument("--ready-file", type=pathlib.Path)
    args = parser.parse_args(argv)
    try:
        return run_embedded(args.state_dir, args.listen, runtime=args.runtime, ready_file=args.ready_file)
    except ConfigError as exc:
        print(f"sf up: configuration error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"sf up: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
