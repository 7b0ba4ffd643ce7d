"""The runner: start the training command, report everything, exit with the command's code.

Order of events in the journal: RUNNER_STARTED, SYSTEM "running ...", COMMAND_STARTED, logs /
metrics / samples, SYSTEM "... exited with code N", COMMAND_EXITED. A check that fails before the
command starts gives RUNNER_FAILED (PRECHECK, exit 96); a bug or broken environment in the runner
gives RUNNER_FAILED (INFRA, exit 95). Stop requests (SIGTERM/SIGINT to the runner, STOP/PAUSE
from the console) give SIGNALLED and a SIGTERM to the command's process group.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import platform
import shlex
import signal
import socket
import sys
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sfpb.starforge.ingest import v1 as ingest

from . import secrecy
from .adapters import AdapterContext, get_adapter
from .capsule_file import CapsuleSpec, read_capsule
from .diagnose import FailureHints
from .environment import training_env
from .errors import EXIT_PRECHECK, EXIT_RUNNER_ERROR, PrecheckError, RunnerConfigError
from .journal import Journal, JournalError
from .logmetrics import LogMetrics
from .logs import LogForwarder
from .masking import secret_mask
from .process import TrainingProcess, exit_status
from .reporter import FailureClass, LogStream, Phase, Reporter
from .runtime_check import check_runtime
from .settings import RunnerSettings
from .telemetry import TelemetryListener

if TYPE_CHECKING:
    from .ingest import IngestSender

# After the command exits, how long processes it left behind may keep its output pipes open.
PIPE_GRACE_SECONDS = 1.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# A stop that arrives while the last records are being delivered leaves them this long.
DRAIN_AFTER_STOP_SECONDS = 2.0


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class Runner:
    def __init__(self, settings: RunnerSettings, environ: dict[str, str]) -> None:
        self._settings = settings
        self._environ = environ
        self._spec: CapsuleSpec | None = None
        self._spec_error: Exception | None = None
        self._reporter: Reporter | None = None
        self._proc: TrainingProcess | None = None
        self._command_name = "the training command"
        self._stop_task: asyncio.Future[None] | None = None
        self._stop_requested = False
        self._stopped_by_us = False
        self._sender: IngestSender | None = None
        self._command_started = asyncio.Event()
        self._draining = False

    async def run(self) -> int:
        try:
            self._spec = read_capsule(self._settings.capsule_dir)
            attempt_id = self._spec.attempt_id
        except (OSError, ValueError) as exc:
            self._spec_error = exc
            attempt_id = self._environ.get("FORGE_ATTEMPT_ID", "")
        try:
            journal = Journal(self._settings.scratch_dir / "journal")
        except JournalError as exc:
            print(f"starforge: {exc}; cannot report anything", file=sys.stderr, flush=True)
            return EXIT_RUNNER_ERROR
        reporter = self._reporter = Reporter(journal, on_record=self._notify_sender)
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, self._on_runner_signal, sig)
        try:
            attempt = asyncio.ensure_future(self._attempt(reporter))
            # The training command starts first; the sender (grpclib, h2, ssl) is imported and
            # connects while it runs. Every record is journaled first, so none waits for it.
            started = asyncio.ensure_future(self._command_started.wait())
            await asyncio.wait([attempt, started], return_when=asyncio.FIRST_COMPLETED)
            started.cancel()
            sender = self._start_sender(journal, attempt_id)
            sender_task = asyncio.ensure_future(sender.run())
            code = await attempt
            self._draining = True
            # Signals stay handled while draining: a stop now shortens the drain, and the exit code
            # stays the command's.
            await self._drain(sender, journal)
        finally:
            for sig in STOP_SIGNALS:
                loop.remove_signal_handler(sig)
        sender.close()
        try:
            await asyncio.wait_for(sender_task, 3.0)
        except Exception:  # asyncio.TimeoutError included (not a TimeoutError on 3.10)
            sender_task.cancel()
        journal.close()
        return code

    def _start_sender(self, journal: Journal, attempt_id: str) -> IngestSender:
        """The ingest sender, imported only now (after the command started), told of what is journaled."""
        from .ingest import IngestSender

        sender = self._sender = IngestSender(
            journal,
            address=self._settings.ingest_addr,
            token=self._settings.ingest_token,
            ca_pem=self._settings.ingest_ca_pem,
            attempt_id=attempt_id,
            on_signal=self._on_control_signal,
        )
        sender.notify()
        return sender

    def _notify_sender(self) -> None:
        if self._sender is not None:
            self._sender.notify()

    async def _drain(self, sender: IngestSender, journal: Journal) -> None:
        if await sender.drain(self._settings.drain_seconds) or sender.refusal is not None:
            return  # (a refusal was said when it came)
        print(
            f"starforge: {journal.unacked} records were not acknowledged by the console within "
            f"{self._settings.drain_seconds:g} s (FORGE_INGEST_DRAIN_SECONDS); they remain in "
            f"{journal.directory}",
            file=sys.stderr,
            flush=True,
        )

    # -- the attempt -------------------------------------------------------------------------

    async def _attempt(self, reporter: Reporter) -> int:
        reporter.lifecycle(Phase.RUNNER_STARTED, details=self._runner_facts())
        try:
            if self._spec_error is not None:
                raise RuntimeError(f"cannot read capsule.json: {self._spec_error}")
            assert self._spec is not None
            return await self._run_command(reporter, self._spec)
        except PrecheckError as exc:
            reporter.system(f"starforge: {exc}")
            if exc.hint:
                reporter.system(f"starforge: hint: {exc.hint}")
            reporter.lifecycle(
                Phase.RUNNER_FAILED,
                message=str(exc),
                failure_class=FailureClass.PRECHECK,
                details={"hint": exc.hint} if exc.hint else None,
            )
            return EXIT_PRECHECK
        except Exception as exc:
            traceback.print_exc()
            message = f"runner internal error: {type(exc).__name__}: {exc}"
            if self._proc is not None and self._proc.returncode is None:
                await self._proc.stop(self._settings.stop_grace_seconds)
            reporter.system(f"starforge: {message}")
            reporter.lifecycle(Phase.RUNNER_FAILED, message=message, failure_class=FailureClass.INFRA)
            return EXIT_RUNNER_ERROR

    async def _run_command(self, reporter: Reporter, spec: CapsuleSpec) -> int:
        settings = self._settings
        check_runtime(spec.run, self._environ)
        adapter = get_adapter(spec.run.adapter)
        config_path = settings.scratch_dir / "config.json"
        config_path.write_text(json.dumps(spec.run.config, indent=2, sort_keys=True) + "\n")
        ctx = AdapterContext(
            run=spec.run,
            capsule_dir=settings.capsule_dir,
            workspace_dir=settings.workspace_dir,
            scratch_dir=settings.scratch_dir,
            config_path=config_path,
            environ=self._environ,
        )
        command = adapter.command(ctx)
        self._command_name = command.name
        loop = asyncio.get_running_loop()
        hints = FailureHints()
        listener = TelemetryListener(reporter, attempt_id=spec.attempt_id, scratch_dir=settings.scratch_dir)
        with listener as telemetry:
            telemetry.start(loop)
            env = training_env(
                self._environ,
                spec=spec,
                capsule_dir=settings.capsule_dir,
                report_socket=telemetry.name,
                config_path=config_path,
            )
            env.update(command.env)
            if self._stop_requested:
                reporter.system(f"starforge: stopped before {command.display} started")
                return 128 + signal.SIGTERM
            reporter.system(f"starforge: running {command.display}")
            proc = self._proc = await TrainingProcess.start(command.argv, cwd=command.cwd, env=env)
            self._command_started.set()
            reporter.lifecycle(
                Phase.COMMAND_STARTED,
                details={"command": shlex.join(command.argv), "pid": str(proc.pid), "cwd": str(command.cwd)},
            )
            parsed = LogMetrics(command.metrics, reporter).observe if command.metrics is not None else None
            mask = secret_mask(self._environ)
            out = LogForwarder(reporter, LogStream.STDOUT, _binary(sys.stdout), parsed, mask)
            err = LogForwarder(reporter, LogStream.STDERR, _binary(sys.stderr), _both(hints.observe, parsed), mask)
            pumps: list[asyncio.Future[None]] = [
                asyncio.ensure_future(out.pump(proc.stdout)),
                asyncio.ensure_future(err.pump(proc.stderr)),
            ]
            if self._stop_requested:
                self._start_stop("stop requested before the command started", "SIGTERM")
            returncode = await proc.wait()
            await self._finish_pipes(proc, pumps)
            telemetry.drain()
        if self._stop_task is not None:
            await self._stop_task
        code, sig = exit_status(returncode)
        if sig:
            text = f"{command.name} was killed by {_signal_name(sig)} (exit code {code})"
        else:
            text = f"{command.name} exited with code {code}"
        reporter.system(f"starforge: {text}")
        reporter.lifecycle(
            Phase.COMMAND_EXITED,
            exit_code=code,
            signal=sig,
            message=text,
            failure_class=hints.classify(code, stopped=self._stopped_by_us),
        )
        return code

    async def _finish_pipes(self, proc: TrainingProcess, pumps: list[asyncio.Future[None]]) -> None:
        """Collect the last output; kill what the command left running in its group."""
        _done, pending = await asyncio.wait(pumps, timeout=PIPE_GRACE_SECONDS)
        proc.kill_leftovers()
        if pending:
            assert self._reporter is not None
            self._reporter.system(
                f"starforge: {self._command_name} exited but processes it started kept its output open; killed them"
            )
            _done, pending = await asyncio.wait(pending, timeout=PIPE_GRACE_SECONDS)
            for pump in pending:
                pump.cancel()
        for pump in pumps:
            error = None if pump.cancelled() or not pump.done() else pump.exception()
            if error is not None:
                raise error

    # -- stopping ----------------------------------------------------------------------------

    def _on_runner_signal(self, sig: int) -> None:
        name = _signal_name(sig)
        if self._draining and self._sender is not None:
            print(
                f"starforge: {name} while reporting the last records: {DRAIN_AFTER_STOP_SECONDS:g} s more",
                file=sys.stderr,
                flush=True,
            )
            self._sender.shorten_drain(DRAIN_AFTER_STOP_SECONDS)
            return
        if self._stop_task is not None and self._proc is not None:
            # A second Ctrl-C / SIGTERM: do not wait for the grace period.
            print(f"starforge: {name} again: killing {self._command_name} now", file=sys.stderr, flush=True)
            self._proc.signal_group(signal.SIGKILL)
            return
        self._start_stop(f"the runner received {name}", name)

    def _on_control_signal(self, control: ingest.ControlSignal) -> None:
        if control == ingest.ControlSignal.STOP:
            self._start_stop("the console asked to stop the job", "STOP")
        elif control == ingest.ControlSignal.PAUSE:
            self._start_stop("the console asked to pause the job", "PAUSE")

    def _start_stop(self, reason: str, source: str) -> None:
        if self._stop_task is not None:
            return
        if self._proc is None:
            if not self._stop_requested and self._reporter is not None:
                self._reporter.lifecycle(Phase.SIGNALLED, message=reason, details={"signal": source})
            self._stop_requested = True  # acted on once the command is about to start
            return
        if self._proc.returncode is not None:
            return
        self._stop_task = asyncio.ensure_future(self._stop(reason, source))

    async def _stop(self, reason: str, source: str) -> None:
        assert self._proc is not None
        assert self._reporter is not None
        grace = self._settings.stop_grace_seconds
        self._stopped_by_us = True
        if not self._stop_requested:
            self._reporter.lifecycle(Phase.SIGNALLED, message=reason, details={"signal": source})
        self._reporter.system(
            f"starforge: {reason}: sending SIGTERM to {self._command_name}, SIGKILL after {grace:g} s"
        )
        if await self._proc.stop(grace):
            self._reporter.system(
                f"starforge: {self._command_name} did not exit within {grace:g} s of SIGTERM; sent SIGKILL"
            )

    def _runner_facts(self) -> dict[str, str]:
        facts = {
            "python": platform.python_version(),
            "host": socket.gethostname(),
            "runner_pid": str(os.getpid()),
        }
        if self._spec is not None:
            facts["runner"] = self._spec.runner
        if self._environ.get("FORGE_RESUME") == "1":
            facts["resume"] = "1"
        return facts


LineObserver = Callable[[list[str]], None]


def _both(first: LineObserver, second: LineObserver | None) -> LineObserver:
    if second is None:
        return first

    def observe(lines: list[str]) -> None:
        first(lines)
        second(lines)

    return observe


def _binary(stream: Any) -> Any:
    return getattr(stream, "buffer", None)


def main(environ: dict[str, str] | None = None) -> int:
    env = dict(os.environ if environ is None else environ)
    # Before the token is read: from now on same-user processes (the training command) cannot
    # read this process's memory, environment or file descriptors.
    secrecy.make_undumpable()
    try:
        settings = RunnerSettings.from_environ(env)
        settings = dataclasses.replace(settings, ingest_token=secrecy.take_token(settings.ingest_token_file))
    except RunnerConfigError as exc:
        print(f"starforge: runner cannot start: {exc}", file=sys.stderr, flush=True)
        return EXIT_RUNNER_ERROR
    try:
        return asyncio.run(Runner(settings, env).run())
    except Exception:
        traceback.print_exc()
        return EXIT_RUNNER_ERROR


def entry() -> None:
    """Run the runner and exit with its code, without the interpreter's teardown.

    When main() returns, everything the runner owes is done: the command was reaped, the journal
    closed (fsync'ed if it holds unacknowledged records), the sender's last acknowledged record
    waited for (or the unacknowledged ones left in the journal, said on stderr), the event loop
    shut down and its executor's threads joined; the runner starts no other threads and registers
    no exit handlers. What the normal exit would add is the teardown of every imported module,
    tens of milliseconds of CPU per attempt, for nothing. Only the standard streams still need their buffers written.
    """
    code = main()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed or broken pipe: nothing left to tell it
            stream.flush()
    os._exit(code)
