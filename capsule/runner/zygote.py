"""A pre-forked runner: one warm process per node and runner venv that forks each attempt's runner.

An attempt started the usual way pays two interpreter starts and the runner's imports (most of
its CPU) before its command runs. The process runtime's executor (executor_svc/local/zygote.py)
instead starts this process once per shared runner venv, exactly as a runner starts (the venv's
own entry, ``PEX_MODULE=sfrunner.zygote:serve``), as root, with an empty environment, in ``/``;
it imports what the runner imports and then only forks.

What it reads from the executor (stdin) is one line per attempt: the name of a spec file in a
directory only root can enter. It never opens that file: the forked child does. So the zygote's
memory, which every runner it forks inherits, never holds anything of any attempt: no
environment, no path, no id. It answers with the pid of the child (stdout).

One fork per attempt: the child is the attempt's runner itself. It leads a new session, reads
and deletes its spec, and hands the zygote an open descriptor of the attempt's directory (over a
socket pair made for that fork, `SCM_RIGHTS`), then writes ``wrapper.pid`` (its own pid) into
that directory, drops to the attempt's uid (no supplementary groups, no_new_privs), takes the
attempt's environment and working directory and runs bootstrap.sh's own program (read from the
attempt's capsule, with another ``__name__``): the integrity check of capsule.json and every file
it lists, the set-aside of the job's PEX_ variables, and the shared-venv check. Only when that
check names this very venv does the runner's ``main`` run here, in the forked process; otherwise
the process execs ``sh bootstrap.sh``, the usual way. When the executor names its own capsule's
bootstrap.sh (``FORGE_ZYGOTE_BOOTSTRAP``, with ``warm_capsule``), the zygote compiles that
program once as it starts; a process whose bootstrap.sh holds the very same program text runs
that code, and compiles any other program from its own file.

The zygote, root, is what a wrapper process per attempt used to be: it waits for each child and
writes its exit code to ``exit_code`` in the child's directory, through the descriptor (128 + the
signal's number when a signal ended it, as ``sh`` says it), before it reaps the child; until then
the ended child is a zombie the executor still counts as running. The job cannot forge it: the
directory is root's, and the status is the kernel's. What the zygote holds of an attempt is that
descriptor (a number; no name) and the child's pid, for as long as the child runs; a child closes
every inherited descriptor before it reads anything of its own attempt. When its input ends (the
executor stopped, or died even by kill -9) the zygote forks no more, waits for the attempts still
running and writes their exit codes, then exits. It ignores SIGINT and SIGHUP (a terminal's
interrupt or hang-up reaches the executor's whole process group); a child sets its own.

What a forked runner shares with the others: the code imported before the fork (the same bytes
the venv holds), the address-space layout and the string-hash secret of the zygote (the training
command is exec'd, so it has its own). It shares no writable memory with anything: each fork is
a private copy, and the runner is not dumpable (a setuid from root makes it so; the runner also
says so itself), so even its own job cannot read it.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import json
import os
import signal
import socket
import sys
import traceback
from types import CodeType
from typing import Any, NoReturn

from . import boot

SPEC_DIR_ENV = "FORGE_ZYGOTE_SPECS"  # the directory of spec files, set by the executor at start
# A bootstrap.sh whose program the zygote compiles once (the executor's own capsule, when it has
# one): an attempt whose bootstrap.sh holds the very same program runs that code object instead
# of compiling the program again (1-1.6 ms of every forked attempt's CPU).
BOOTSTRAP_ENV = "FORGE_ZYGOTE_BOOTSTRAP"
PR_SET_NO_NEW_PRIVS = 38
EXIT_WRAPPER_ERROR = 95  # the runner's own "runner error" code: the attempt could not be started
BOOT_START = "BOOT='\n"
BOOT_END = "\n'\n"

_COMPILED: dict[str, CodeType] = {}  # bootstrap's program -> its code (compile_bootstrap), at most one
_ATTEMPTS: dict[int, int] = {}  # pid of a running attempt -> descriptor of its directory (no name)


def preload() -> None:
    """What a runner imports, before the command starts and after (the ingest sender), and every
    adapter: imported once here, shared by every fork; and the messages' metadata."""
    for name in boot.LAZY:
        boot.import_lazily(name)
    boot.preload_messages_runtime()
    boot.preload_client_stubs()
    from . import ingest, main  # noqa: F401 - imported for the forks
    from .adapters import REGISTRY

    for module, _ in REGISTRY.values():
        importlib.import_module(f".adapters.{module}", __package__)
    import asyncio
    import hashlib  # noqa: F401 - bootstrap's program uses these
    import re  # noqa: F401
    import shutil  # noqa: F401 - the runner's, on first use
    import stat  # noqa: F401

    asyncio.new_event_loop().close()  # the selector and unix-events modules
    _describe_messages()


def _describe_messages() -> None:
    """betterproto2 describes a message class (its fields' types, from typing.get_type_hints) the
    first time the class is used, in every process: a third of a forked runner's profiled time. Done here
    once for every generated message class, each fork inherits the descriptions."""
    import betterproto2

    for name, module in list(sys.modules.items()):
        if not name.startswith("sfpb.") or module is None:
            continue
        for value in list(vars(module).values()):
            if isinstance(value, type) and issubclass(value, betterproto2.Message) and value.__module__ == name:
                with contextlib.suppress(Exception):  # described on first use instead, as before
                    value._betterproto  # type: ignore[arg-type]  # noqa: B018 - computed and kept


def serve() -> None:
    """Fork an attempt's runner per line read from stdin; answer its pid (or ``error <text>``) on
    stdout. When the input ends, wait for the runners still running, then return."""
    spec_dir = os.environ.get(SPEC_DIR_ENV, "")
    if not spec_dir.startswith("/"):
        print(f"error {SPEC_DIR_ENV} is not an absolute path", flush=True)
        sys.exit(2)
    venv = os.environ.get("VIRTUAL_ENV", "")  # set by the venv's entry: this venv's directory
    bootstrap = os.environ.get(BOOTSTRAP_ENV, "")
    os.environ.clear()
    preload()
    if bootstrap.startswith("/"):
        compile_bootstrap(bootstrap)
    for sig in (signal.SIGINT, signal.SIGHUP):  # a terminal's, meant for the executor's group
        signal.signal(sig, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, _reap)
    print("ready", flush=True)
    for line in sys.stdin:
        name = line.strip()
        if not name or "/" in name or name.startswith(".") or "\0" in name:
            print("error bad spec name", flush=True)
            continue
        try:
            pid = _fork_attempt(os.path.join(spec_dir, name), venv)
        except OSError as exc:
            print(f"error fork: {exc.strerror or exc}", flush=True)
            continue
        print(pid, flush=True)
    _finish()


def _fork_attempt(spec_path: str, venv: str) -> int:
    """Fork the attempt's runner; keep the descriptor of its directory that it sends back. SIGCHLD
    waits meanwhile, so a child that ends at once is recorded by `_reap` with its directory."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    try:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            pid = os.fork()
            if pid == 0:
                ours.close()
                _attempt(spec_path, venv, theirs)
            theirs.close()
            directory = _received_directory(ours)
        finally:
            ours.close()
            with contextlib.suppress(OSError):
                theirs.close()
        if directory is not None:
            _ATTEMPTS[pid] = directory
        return pid
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})


def _received_directory(sock: socket.socket) -> int | None:
    """The descriptor the child sent (None when it ended or failed before it could)."""
    try:
        _, fds, _, _ = socket.recv_fds(sock, 1, 1)
    except OSError:
        return None
    for extra in fds[1:]:
        os.close(extra)
    return fds[0] if fds else None


def _reap(signum: int, frame: Any) -> None:
    """Record the exit code of every attempt that ended, then reap it (its CPU then counts as this
    process's children's, as a started attempt's counts as the executor's)."""
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is None:
            return
        _record(info)


def _finish() -> None:
    """The input ended: fork no more; wait for every attempt still running, recording each."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is not None:
            _record(info)


def _record(info: os.waitid_result) -> None:
    """Write the ended child's exit code into its directory (when it sent one), then reap it."""
    directory = _ATTEMPTS.pop(info.si_pid, None)
    if directory is not None:
        try:
            _write_atomically(directory, "exit_code", _exit_code(info))
        except OSError:
            traceback.print_exc()
        finally:
            os.close(directory)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(info.si_pid, 0)


def _exit_code(info: os.waitid_result) -> int:
    """The exit code as sh reports it (128 + signal number when signalled)."""
    if info.si_code == os.CLD_EXITED:
        return info.si_status
    return 128 + info.si_status


def _attempt(spec_path: str, venv: str, tell: socket.socket) -> NoReturn:
    """The attempt's runner (root until `_run_job` drops to the job's uid): see the module
    docstring. Never returns."""
    code = EXIT_WRAPPER_ERROR
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, set())  # the zygote's block is not the job's
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        keep = tell.fileno()
        os.closerange(3, keep)  # other attempts' directories, and anything else of the zygote's
        os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))
        os.setsid()
        with open(spec_path, "rb") as f:
            raw = f.read()
        os.unlink(spec_path)  # the claim: the executor gives up an attempt only if it deletes it first
        spec = json.loads(raw)
        root = spec["root"]
        directory = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW)
        socket.send_fds(tell, [b"d"], [directory])
        tell.close()
        _standard_streams(spec["log"])  # closes `directory` too
        os.chdir(root)
        _write_atomically(None, "wrapper.pid", os.getpid())
        code = _run_job(spec, venv)
    except SystemExit as exc:  # bootstrap's program exits 97/98 with its own message
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
        sys.stderr.write("starforge: the pre-forked runner could not start this attempt\n")
    _flush()
    os._exit(code)


def _standard_streams(log: str) -> None:
    """stdin from /dev/null, stdout and stderr to the attempt's log, no other descriptor open."""
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))


def _write_atomically(directory: int | None, name: str, value: int) -> None:
    """`name` holding `value`, through a temporary file renamed over it; in the folder of the
    descriptor `directory`, or in the working directory (None)."""
    fd = os.open(f"{name}.tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644, dir_fd=directory)
    try:
        os.write(fd, f"{value}\n".encode())
    finally:
        os.close(fd)
    os.replace(f"{name}.tmp", name, src_dir_fd=directory, dst_dir_fd=directory)


def _run_job(spec: dict[str, Any], venv: str) -> int:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)  # the zygote ignores it
    signal.signal(signal.SIGINT, signal.default_int_handler)
    uid = int(spec["uid"])
    if uid >= 0:
        _drop_privileges(uid)
    env: dict[str, str] = spec["env"]
    os.chdir(spec["cwd"])
    os.environ.clear()
    os.environ.update(env)
    capsule_dir = env["FORGE_CAPSULE_DIR"]
    code = bootstrap_code(os.path.join(capsule_dir, "bootstrap.sh"))
    # bootstrap.sh's program as `python -I -c "$BOOT" "$PY"` runs it, minus its `main`
    sys.argv[:] = ["-c", env.get("FORGE_PEX_PYTHON", sys.executable)]
    checks: dict[str, Any] = {"__name__": "starforge_bootstrap"}
    exec(code, checks)  # noqa: S102
    runner = checks["checked_runner"]()
    checks["set_aside_job_pex_env"]()
    found = checks["shared_venv"](runner)
    if found is None or os.path.realpath(os.path.dirname(os.path.dirname(found[0]))) != os.path.realpath(venv):
        # not this zygote's venv (another runner, or not one root alone can change): the usual way
        os.execvp("sh", ["sh", os.path.join(capsule_dir, "bootstrap.sh")])  # noqa: S606 - as the executor runs it
    # what the venv's own entry (`<venv>/pex`) does before it calls the runner
    for key in [k for k in os.environ if k.startswith("PEX_")]:
        del os.environ[key]
    os.environ["VIRTUAL_ENV"] = venv
    sys.argv[:] = [found[1]]
    from .main import main

    return main(dict(os.environ))


def _drop_privileges(uid: int) -> None:
    """What `setpriv --reuid=uid --regid=uid --clear-groups --no-new-privs` does."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if os.getuid() != uid or os.geteuid() != uid or os.getgid() != uid or os.getgroups():
        raise OSError(f"could not drop to uid {uid}")


def compile_bootstrap(path: str) -> None:
    """Compile the program of the bootstrap.sh at `path` once, here in the zygote, for every fork
    (`bootstrap_code`). Nothing of any attempt: the executor's own capsule. When it cannot be read
    the forks compile their attempt's program, as without it."""
    try:
        program = _bootstrap_program(path)
        _COMPILED[program] = compile(program, path, "exec")
    except (OSError, ValueError, SyntaxError) as exc:  # ValueError: not UTF-8, or no BOOT word
        print(f"starforge zygote: no precompiled bootstrap program ({type(exc).__name__}: {exc})", file=sys.stderr)


def bootstrap_code(path: str) -> CodeType:
    """The code of the program of the attempt's bootstrap.sh at `path`: the zygote's compiled code
    when the program is the very same text (the same code, compiled once), else compiled now."""
    program = _bootstrap_program(path)
    compiled = _COMPILED.get(program)
    return compiled if compiled is not None else compile(program, path, "exec")


def _bootstrap_program(path: str) -> str:
    """The Python program bootstrap.sh runs (its single-quoted BOOT word)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    start = text.index(BOOT_START) + len(BOOT_START)
    return text[start : text.index(BOOT_END, start)]


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed stream: nothing left to tell it
            stream.flush()
