"""`sf up` / `sf down`: run the embedded console (control plane + local executor) on this machine.

`sf up` starts the console (`control.embedded`) as a child process and waits for it: the CLI
never imports the control plane's code (an import-linter contract in `make lint`). `--detach`
starts the same process in its own session instead (output in `<state>/console.log`), waits for
its ready file, records its PID in `<state>/console.pid` and its state directory in the client's
`consoles.yaml` (by address), and logs the client in with the admin token when no console is
configured yet. `sf down` stops exactly that PID: the one in `--state-dir`, else that of the console
the client config names, else that of the default state directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from typing import Annotated, Any

import typer

from cli import config as client_config
from cli.context import AppState, app_state
from cli.errors import EXIT_FAILURE, CliError, usage
from cli.output import Output
from common.source import checkout

PID_FILE = "console.pid"
READY_FILE = "console.ready.json"
LOG_FILE = "console.log"
DEFAULT_LISTEN = "127.0.0.1:7070"
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
LOG_TAIL_LINES = 30
# The console process runs this module's `main` (named, never imported, by the CLI) and carries
# this marker argument, by which `sf down` recognises it.
CONSOLE_MODULE = "control.embedded"
CONSOLE_MARKER = b"--state-dir"


def default_state_dir(env: Mapping[str, str]) -> pathlib.Path:
    """$STARFORGE_HOME, else $XDG_DATA_HOME/starforge, else ~/.local/share/starforge."""
    if env.get("STARFORGE_HOME"):
        return pathlib.Path(env["STARFORGE_HOME"]).expanduser()
    base = env.get("XDG_DATA_HOME") or str(pathlib.Path.home() / ".local" / "share")
    return pathlib.Path(base).expanduser() / "starforge"


def client_address(address: str) -> str:
    """The address a client should dial for a listen address (wildcards become loopback)."""
    host, _, port = address.rpartition(":")
    if host in ("", "0.0.0.0", "*"):  # a wildcard listen address: dial loopback
        return f"127.0.0.1:{port}"
    if host in ("[::]", "::"):
        return f"[::1]:{port}"
    return address


def read_ready(path: pathlib.Path) -> dict[str, Any] | None:
    """The ready file's content once it is complete JSON, else None."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("address") else None


def log_tail(path: pathlib.Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


def pid_alive(pid: int) -> bool:
    """True when `pid` runs (a zombie counts as gone; our own zombie child is reaped)."""
    with contextlib.suppress(ChildProcessError, OSError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        status = pathlib.Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    return "\nState:\tZ" not in status


def is_our_console(pid: int) -> bool:
    """Whether `pid` still is a console process `sf up` started (a recycled PID is not ours)."""
    try:
        parts = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True  # no /proc (macOS): trust the pid file
    return CONSOLE_MARKER in parts and any(CONSOLE_MODULE.encode() in part for part in parts)


def adopt_console(state: AppState, info: dict[str, Any], force: bool, out: Output) -> bool:
    """Save the console address and admin token to the client config when none is set (or force)."""
    cfg = state.config()
    address = client_address(str(info["address"]))
    token_file = pathlib.Path(str(info.get("token_file", "")))
    if not force and cfg.file_console and cfg.file_token:
        if client_config.normalize_address(cfg.file_console) == address:
            return False  # already pointing here
        out.info(
            f"your client config already points at {cfg.file_console}; to use this console run "
            f"`sf login --console {address} --token $(cat {token_file})` (or `sf up --login`)"
        )
        return False
    try:
        token = token_file.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise CliError(f"cannot read the admin token {token_file}: {exc.strerror}") from None
    client_config.save(cfg.path, console=address, token=token)
    out.success(f"saved console {address} and the token of `{info.get('user', 'admin')}` to {cfg.path}")
    return True


def _wait_ready(proc: subprocess.Popen[bytes], ready: pathlib.Path, log: pathlib.Path, out: Output) -> dict[str, Any]:
    deadline = time.monotonic() + READY_TIMEOUT_S
    status = out.err.status("starting the console…") if out.interactive else contextlib.nullcontext()
    with status:
        while True:
            info = read_ready(ready)
            if info is not None:
                return info
            if proc.poll() is not None:
                raise CliError(
                    f"the console exited with code {proc.returncode} before it was ready (log: {log})",
                    EXIT_FAILURE,
                    details=log_tail(log),
                )
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(10)
                raise CliError(
                    f"the console was not ready after {READY_TIMEOUT_S:.0f} s and was stopped (log: {log})",
                    EXIT_FAILURE,
                    details=log_tail(log),
                )
            time.sleep(0.1)


def _child_command(state_dir: pathlib.Path, listen: str, runtime: str, ready: pathlib.Path) -> list[str]:
    """The console process: `control.embedded.main` of this very StarForge, this interpreter's
    installed packages, or the source checkout sf runs from (first on the path). `-P`: the current
    directory is never on the path, so files where `sf up` is run cannot stand in for ours."""
    boot = f"import sys; from {CONSOLE_MODULE} import main; sys.exit(main())"
    root = checkout()
    if root is not None:
        boot = f"import sys; sys.path.insert(0, {str(root)!r}); {boot.removeprefix('import sys; ')}"
    return [
        sys.executable, "-P", "-c", boot, "--state-dir", str(state_dir), "--listen", listen,
        "--runtime", runtime, "--ready-file", str(ready),
    ]  # fmt: skip


def up_detached(state: AppState, state_dir: pathlib.Path, listen: str, runtime: str, login: bool, out: Output) -> None:
    """Start the console in the background and wait until it serves."""
    pid_file, ready, log = state_dir / PID_FILE, state_dir / READY_FILE, state_dir / LOG_FILE
    if pid_file.exists():
        with contextlib.suppress(ValueError, OSError):
            pid = int(pid_file.read_text().strip())
            if pid_alive(pid) and is_our_console(pid):
                info = read_ready(ready) or {}
                out.info(f"a console is already running (pid {pid}) at {info.get('address', '?')}; `sf down` stops it")
                if info and login:
                    adopt_console(state, info, True, out)
                return
        pid_file.unlink(missing_ok=True)
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    ready.unlink(missing_ok=True)
    with log.open("ab") as log_fd:
        proc = subprocess.Popen(
            _child_command(state_dir, listen, runtime, ready),
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=state_dir,
            close_fds=True,
        )
    pid_file.write_text(f"{proc.pid}\n")
    try:
        info = _wait_ready(proc, ready, log, out)
    except BaseException:
        pid_file.unlink(missing_ok=True)
        raise
    address = client_address(str(info["address"]))
    client_config.remember_console(state.env, address, state_dir)
    out.success(f"console running at {address} (pid {proc.pid}); log: {log}; stop it with `sf down`")
    adopt_console(state, info, login, out)


def _announce_when_ready(state: AppState, ready: pathlib.Path, login: bool, out: Output, stop: threading.Event) -> None:
    """Say where the console serves once its ready file appears, and save the client config."""
    while not stop.is_set():
        info = read_ready(ready)
        if info is not None:
            out.success(f"console ready at {client_address(str(info['address']))}; Ctrl-C stops it")
            try:
                adopt_console(state, info, login, out)
            except (CliError, OSError) as exc:  # the console keeps running; just say why
                out.warn(f"could not save the client config: {exc}")
            return
        stop.wait(0.2)


def _wait_child(proc: subprocess.Popen[bytes]) -> int:
    """Wait for the console process; SIGTERM or Ctrl-C of `sf up` stop it (its own PID only)."""

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        while True:
            try:
                return proc.wait()
            except KeyboardInterrupt:  # the terminal sent SIGINT to the child too; make sure
                forward(signal.SIGTERM, None)
    finally:
        signal.signal(signal.SIGTERM, previous)


def up_foreground(state: AppState, state_dir: pathlib.Path, listen: str, runtime: str, login: bool, out: Output) -> int:
    """Run the console as a child process until SIGTERM/SIGINT; its exit code."""
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    ready = state_dir / READY_FILE
    ready.unlink(missing_ok=True)
    out.info(f"starting the console on {listen} (state in {state_dir})")
    proc = subprocess.Popen(_child_command(state_dir, listen, runtime, ready), stdin=subprocess.DEVNULL)
    stop = threading.Event()
    threading.Thread(
        target=_announce_when_ready, args=(state, ready, login, out, stop), name="sf-up-ready", daemon=True
    ).start()
    try:
        return _wait_child(proc)
    finally:
        stop.set()
        ready.unlink(missing_ok=True)


def down(state_dir: pathlib.Path, out: Output, timeout: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM the console recorded in the pid file (that PID only) and wait for it to exit."""
    pid_file = state_dir / PID_FILE
    try:
        pid = int(pid_file.read_text().strip())
    except FileNotFoundError:
        out.info(f"no console running from {state_dir} (no {PID_FILE})")
        return
    except (ValueError, OSError):
        pid_file.unlink(missing_ok=True)
        raise usage(f"{pid_file} was unreadable and has been removed; stop the console by hand if it runs") from None
    if not pid_alive(pid) or not is_our_console(pid):
        pid_file.unlink(missing_ok=True)
        (state_dir / READY_FILE).unlink(missing_ok=True)
        out.info(f"the console (pid {pid}) is not running; removed the stale {PID_FILE}")
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    status = out.err.status(f"stopping the console (pid {pid})…") if out.interactive else contextlib.nullcontext()
    with status:
        while pid_alive(pid):
            if time.monotonic() > deadline:
                raise CliError(
                    f"the console (pid {pid}) did not stop within {timeout:.0f} s; "
                    f"see {state_dir / LOG_FILE}, or force it with `kill -9 {pid}`"
                )
            time.sleep(0.1)
    pid_file.unlink(missing_ok=True)
    (state_dir / READY_FILE).unlink(missing_ok=True)
    out.success(f"stopped the console (pid {pid})")


StateDirOpt = Annotated[
    pathlib.Path | None,
    typer.Option(
        "--state-dir", help="Where the console keeps its database, blobs and token (default: $STARFORGE_HOME)."
    ),
]


def register(app: typer.Typer) -> None:
    """Add `up` and `down` to the root app."""

    @app.command("up")
    def up_cmd(
        ctx: typer.Context,
        state_dir: StateDirOpt = None,
        listen: Annotated[str, typer.Option("--listen", help="Address to serve on.")] = DEFAULT_LISTEN,
        runtime: Annotated[
            str, typer.Option("--runtime", help="How jobs run: process (no isolation) or docker.")
        ] = "process",
        detach: Annotated[bool, typer.Option("--detach", "-d", help="Run in the background.")] = False,
        login: Annotated[
            bool, typer.Option("--login", help="Point the client config at this console even if one is set.")
        ] = False,
    ) -> None:
        """Run a console (control plane + local executor) on this machine.

        The first start creates an admin user; its token is saved to your client config
        when none is configured yet, so `sf` works right away.

        Example: `sf up --detach` then `sf down`
        """
        st = app_state(ctx)
        out = st.output()
        if runtime not in ("process", "docker"):
            raise usage(f"--runtime {runtime!r}: expected process or docker")
        directory = (state_dir or default_state_dir(st.env)).expanduser().resolve()
        if detach:
            up_detached(st, directory, listen, runtime, login, out)
            return
        rc = up_foreground(st, directory, listen, runtime, login, out)
        if rc:
            raise typer.Exit(rc)

    @app.command("down")
    def down_cmd(
        ctx: typer.Context,
        state_dir: StateDirOpt = None,
        timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for it to stop.")] = STOP_TIMEOUT_S,
    ) -> None:
        """Stop the console that `sf up --detach` started: the one your client config names
        (wherever its state directory is), or the one of --state-dir.

        Example: `sf down`
        """
        st = app_state(ctx)
        address = st.config().console
        directory = (
            (state_dir or client_config.console_state_dir(st.env, address) or default_state_dir(st.env))
            .expanduser()
            .resolve()
        )
        down(directory, st.output(), timeout)
        if state_dir is None and not (directory / PID_FILE).exists():
            client_config.forget_console(st.env, address)
