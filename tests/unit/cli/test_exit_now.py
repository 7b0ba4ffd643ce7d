"""`sf` ends without the interpreter's teardown (cli.main.exit_now), but only once what an exit
owes is done: its atexit handlers run, buffered output is written, the code is kept, and a
non-daemon thread still working is waited for."""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _run(program: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )


def test_handlers_run_output_is_flushed_and_the_code_kept() -> None:
    r = _run(
        "import atexit, sys\n"
        "from cli.main import exit_now\n"
        "atexit.register(lambda: sys.stderr.write('handler ran\\n'))\n"
        "sys.stdout.write('no newline, still buffered')\n"
        "exit_now(3)\n"
    )
    assert (r.returncode, r.stdout, r.stderr) == (3, "no newline, still buffered", "handler ran\n")


def test_a_non_daemon_thread_still_working_is_waited_for(tmp_path: pathlib.Path) -> None:
    done = tmp_path / "done"
    r = _run(
        "import threading, time, pathlib\n"
        "from cli.main import exit_now\n"
        f"threading.Thread(target=lambda: (time.sleep(0.5), pathlib.Path({str(done)!r}).write_text('x'))).start()\n"
        "exit_now(None)\n"
    )
    assert r.returncode == 0, r.stderr
    assert done.read_text() == "x"
