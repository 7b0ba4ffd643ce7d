"""The capsule end to end: sh bootstrap.sh -> runner.pex -> train.sh, reporting to a real gRPC server."""

from __future__ import annotations

import asyncio
import pathlib
import signal
from typing import Any

import pytest
from starforge_api.ingest.v1 import ingest_service_pb2 as ingest_pb

from .fake_ingest import FakeIngest
from .harness import Bootstrap, lay_out, run_capsule
from .pythons import find_python

pytestmark = pytest.mark.timeout(120)

TRAIN_PY = """\
import json, os, sys
import starforge

print("hello from train.py")
print("config", json.dumps(starforge.config()), os.path.dirname(os.environ["FORGE_CONFIG"]))
token_file = os.path.join(os.environ["FORGE_SCRATCH_DIR"], ".forge-ingest-token")
print("token visible:", any(k.startswith("FORGE_INGEST_TOKEN") for k in os.environ) or os.path.exists(token_file))
print("PATH", os.environ["PATH"])
for step in range(5):
    starforge.report(loss=1.0 / (step + 1), lr=0.1)
    print(f"step {step}", flush=True)
starforge.sample("2+2=", "4", reward=1.0, answer="4")
print("warning: almost done", file=sys.stderr)
"""


def demo_workspace(train_sh: str, **extra: str) -> dict[str, str]:
    return {"experiments/demo/train.sh": train_sh, **extra}


async def test_happy_path(tmp_path: pathlib.Path, capsule_manifest: dict[str, Any], ingest: FakeIngest) -> None:
    launch = lay_out(
        tmp_path,
        capsule_manifest,
        demo_workspace("set -e\npython3 experiments/demo/train.py\n", **{"experiments/demo/train.py": TRAIN_PY}),
        ingest_addr=ingest.address,
    )
    result = await run_capsule(launch)
    assert result.returncode == 0, result.stderr
    assert ingest.phases() == [
        "LIFECYCLE_PHASE_RUNNER_STARTED",
        "LIFECYCLE_PHASE_COMMAND_STARTED",
        "LIFECYCLE_PHASE_COMMAND_EXITED",
    ]
    exited = ingest.lifecycle()[-1]
    assert exited.HasField("exit_code")
    assert exited.exit_code == 0
    assert exited.signal == 0
    stdout = ingest.stdout()
    assert stdout[0] == "hello from train.py"
    assert f'config {{"lr": 0.001}} {launch.scratch_dir}' in stdout
    assert "token visible: False" in stdout
    # the runner's own venv stays out of the training command's PATH (its python3 is the image's)
    assert f"PATH {launch.env['PATH']}" in stdout
    assert [f"step {i}" for i in range(5)] == [line for line in stdout if line.startswith("step ")]
    assert ingest.stderr() == ["warning: almost done"]
    assert ingest.system() == ["starforge: running experiments/demo/train.sh", "starforge: train.sh exited with code 0"]
    losses = [(p.step, p.value) for p in ingest.points() if p.name == "loss"]
    assert losses == [(i, 1.0 / (i + 1)) for i in range(5)]
    assert all(p.HasField("time") for p in ingest.points())
    [sample] = ingest.samples()
    assert (sample.step, sample.prompt, sample.completion, sample.reward, dict(sample.extra)) == (
        4,
        "2+2=",
        "4",
        1.0,
        {"answer": "4"},
    )
    # Seq numbers are contiguous from 1 and every record arrived once.
    assert sorted(ingest.records) == list(range(1, len(ingest.records) + 1))
    # one stream; its journal is new, so it starts at seq 1 without asking GetCursor
    assert ingest.calls == ["report"]
    # Logs are echoed on the runner's own stdout/stderr too.
    assert "step 4" in result.stdout
    assert "warning: almost done" in result.stderr


async def test_exit_code_is_the_commands(
    tmp_path: pathlib.Path, capsule_manifest: dict[str, Any], ingest: FakeIngest
) -> None:
    launch = lay_out(tmp_path, capsule_manifest, demo_workspace("echo failing\nexit 3\n"), ingest_addr=ingest.address)
    result = await run_capsule(launch)
    assert result.returncode == 3, result.stderr
    exited = ingest.lifecycle()[-1]
    assert ingest.phases()[-1] == "LIFECYCLE_PHASE_COMMAND_EXITED"
    assert (exited.exit_code, exited.signal) == (3, 0)
    assert exited.failure_class == 1  # FAILURE_CLASS_USER_CODE
    assert ingest.system()[-1] == "starforge: train.sh exited with code 3"
    assert ingest.stdout() == ["failing"]


async def test_the_jobs_pex_variables_reach_its_command_not_the_runner(
    tmp_path: pathlib.Path, capsule_manifest: dict[str, Any], ingest: FakeIngest
) -> None:
    """A job's own PEX_* (`--env`) would make runner.pex run something else in the process that
    reads the run token (PEX_INTERPRETER: a Python prompt; PEX_MODULE: another module). They reach
    the training command, as the job asked, and the runner runs as always."""
    train = 'echo "module=$PEX_MODULE interpreter=$PEX_INTERPRETER path=$PEX_EXTRA_SYS_PATH"\n'
    asked = {"PEX_MODULE": "json.tool", "PEX_INTERPRETER": "1", "PEX_EXTRA_SYS_PATH": str(tmp_path)}
    launch = lay_out(tmp_path, capsule_manifest, demo_workspace(train), ingest_addr=ingest.address, env=asked)
    result = await run_capsule(launch)
    assert result.returncode == 0, result.stderr
    assert ingest.phases()[0] == "LIFECYCLE_PHASE_RUNNER_STARTED", result.stderr
    assert ingest.stdout() == [f"module=json.tool interpreter=1 path={tmp_path}"]


async def test_tampered_workspace_file_is_refused_before_anything_runs(
    tmp_path: pathlib.Path, capsule_manifest: dict[str, Any], ingest: FakeIngest
) -> None:
    launch = lay_out(
        tmp_path,
        capsule_manifest,
        demo_workspace("touch ran\n", **{"experiments/demo/data.txt": "original\n"}),
        ingest_addr=ingest.address,
    )
    tampered = launch.workspace_dir / "experiments/demo/data.txt"
    tampered.write_text("changed\n")
    import hashlib

    expected = hashlib.sha256(b"original\n").hexdigest()
    found = hashlib.sha256(b"changed\n").hexdigest()
    result = await run_capsule(launch)
    assert result.returncode == 97
    assert (
        f"starforge: capsule integrity check failed: workspace/experiments/demo/data.txt: "
        f"expected sha256 {expected}, found {found}"
    ) in result.stderr.splitlines()
    assert not (launch.workspace_dir / "ran").exists()
    assert ingest.records == {}
    assert ingest.cursor_calls == 0


async def test_missing_train_sh_is_a_precheck_failure(
    tmp_path: pathlib.Path, capsule_manifest: dict[str, Any], ingest: FakeIngest
) -> None:
    launch = lay_out(
        tmp_path,
        capsule_manifest,
        {"experiments/demo/other.py": "print(1)\n"},
        ingest_addr=ingest.address,
        entrypoint="experiments/x/train.sh",
    )
    result = await run_capsule(launch)
    assert result.returncode == 96, result.stderr
    assert ingest.phases() == ["LIFECYCLE_PHASE_RUNNER_STARTED", "LIFECYCLE_PHASE_RUNNER_FAILED"]
    failed = ingest.lifecycle()[-1]
    assert failed.message == "experiments/x/train.sh not found in the workspace"
    assert failed.failure_class == 6  # FAILURE_CLASS_PRECHECK
    assert "starforge: experiments/x/train.sh not found in the workspace" in ingest.system()


SLOW_TRAIN_SH = """\
sleep 300 &
echo "child $!" > "$FORGE_SCRATCH_DIR/pids"
echo "shell $$" >> "$FORGE_SCRATCH_DIR/pids"
i=0
while true; do echo "tick $i"; i=$((i+1)); sleep 0.1; done
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


async def _wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def _read_pids(launch: Any) -> list[int]:
    pids_file = launch.scratch_dir / "pids"
    await _wait_for(lambda: pids_file.exists() and len(pids_file.read_text().splitlines()) == 2, 60, "pids")
    return [int(line.split()[1]) for line in pids_file.read_text().splitlines()]


async def test_sigterm_to_the_runner_stops_the_whole_process_group(
    tmp_path: pathlib.Path, capsule_manifest: dict[str, Any], ingest: FakeIngest
) -> None:
    launch = lay_out(tmp_path, capsule_manifest, demo_workspace(SLOW_TRAIN_SH), ingest_addr=ingest.address)
    boot = Bootstrap(launch)
    await boot.start()
    try:
        pids = await _read_pids(launch)
        await _wait_for(lambda: any(line.startswith("tick") for line in ingest.stdout()), 60, "ticks")
        boot.signal(signal.SIGTERM)
        result = await boot.result(30)
    finally:
        boot.kill()
    assert result.returncode == 128 + signal.SIGTERM, result.stderr
    for pid in pids:
        await _wait_for(lambda pid=pid: not _alive(pid), 30, f"pid {pid} to exit")
    assert ingest.phases() == [
        "LIFECYCLE_PHASE_RUNNER_STARTED",
        "LIFECYCLE_PHASE_COMMAND_STARTED",
        "LIFECYCLE_PHASE_SIGNALLED",
        "LIFECYCLE_PHASE_COMMAND_EXITED",
    ]
    signalled, exited = ingest.lifecycle()[-2:]
    assert signalled.details["signal"] == "SIGTERM"
    assert (exited.exit_code, exited.signal) == (143, signal.SIGTERM)
    assert ingest.system()[-1] == "starforge: train.sh was killed by SIGTERM (exit code 143)"


async def test_console_stop_signal_stops_the_command(
    tmp_path: pathlib.Path, capsule_manifest: dict[str, Any], ingest: FakeIngest
) -> None:
    # The command ignores SIGTERM: the runner must SIGKILL it after the grace period.
    train = "trap 'echo got TERM' TERM\n" + SLOW_TRAIN_SH
    launch = lay_out(
        tmp_path,
        capsule_manifest,
        demo_workspace(train),
        ingest_addr=ingest.address,
        env={"FORGE_STOP_GRACE_SECONDS": "1"},
    )
    boot = Bootstrap(launch)
    await boot.start()
    try:
        pids = await _read_pids(launch)
        await _wait_for(lambda: any(line.startswith("tick") for line in ingest.stdout()), 60, "ticks")
        ingest.signal = ingest_pb.CONTROL_SIGNAL_STOP
        result = await boot.result(30)
    finally:
        boot.kill()
    assert result.returncode == 128 + signal.SIGKILL, result.stderr
    for pid in pids:
        await _wait_for(lambda pid=pid: not _alive(pid), 30, f"pid {pid} to exit")
    signalled = ingest.lifecycle()[-2]
    assert (ingest.phases()[-2], signalled.details["signal"]) == ("LIFECYCLE_PHASE_SIGNALLED", "STOP")
    assert "got TERM" in ingest.stdout()
    assert "starforge: train.sh did not exit within 1 s of SIGTERM; sent SIGKILL" in ingest.system()


RESTART_TRAIN_PY = """\
import time
import starforge

for i in range(60):
    print(f"line {i}", flush=True)
    starforge.report(step=i, loss=float(i))
    time.sleep(0.05)
"""


async def test_console_restart_mid_run_loses_and_duplicates_nothing(
    tmp_path: pathlib.Path, capsule_manifest: dict[str, Any], ingest: FakeIngest
) -> None:
    launch = lay_out(
        tmp_path,
        capsule_manifest,
        demo_workspace("python3 experiments/demo/train.py\n", **{"experiments/demo/train.py": RESTART_TRAIN_PY}),
        ingest_addr=ingest.address,
    )
    boot = Bootstrap(launch)
    await boot.start()
    try:
        await _wait_for(lambda: "line 5" in ingest.stdout(), 60, "the first lines")
        port = ingest.port
        await ingest.stop()
        stored_while_down = len(ingest.records)
        await asyncio.sleep(1.5)
        await ingest.start(port)
        result = await boot.result(60)
    finally:
        boot.kill()
    assert result.returncode == 0, result.stderr
    assert stored_while_down < len(ingest.records)
    assert ingest.report_streams >= 2
    # the first stream starts at seq 1 (the journal is new); each one after a failure asks first
    assert ingest.calls[0] == "report"
    assert ingest.calls[1:] == ["cursor", "report"] * (ingest.report_streams - 1)
    assert ingest.stdout() == [f"line {i}" for i in range(60)]
    assert [(p.step, p.value) for p in ingest.points()] == [(i, float(i)) for i in range(60)]
    assert sorted(ingest.records) == list(range(1, len(ingest.records) + 1))
    assert ingest.phases()[-1] == "LIFECYCLE_PHASE_COMMAND_EXITED"


async def test_a_restarted_runner_asks_the_cursor_before_it_sends(
    tmp_path: pathlib.Path, capsule_manifest: dict[str, Any], ingest: FakeIngest
) -> None:
    # The same attempt's runner again, over the journal the first one left: its numbering goes
    # on, and its first connection asks GetCursor (the journal is not new).
    launch = lay_out(tmp_path, capsule_manifest, demo_workspace("echo again\n"), ingest_addr=ingest.address)
    first = await run_capsule(launch)
    assert first.returncode == 0, first.stderr
    sent = len(ingest.records)
    second = await run_capsule(launch)
    assert second.returncode == 0, second.stderr
    assert ingest.calls == ["report", "cursor", "report"]
    assert ingest.duplicates == 0
    assert sorted(ingest.records) == list(range(1, len(ingest.records) + 1))
    assert len(ingest.records) > sent
    assert ingest.stdout() == ["again", "again"]


async def test_unreachable_console_does_not_stop_training_and_drain_is_bounded(
    tmp_path: pathlib.Path, capsule_manifest: dict[str, Any], ingest: FakeIngest
) -> None:
    port = ingest.port
    await ingest.stop()  # nothing listens on the port any more
    launch = lay_out(
        tmp_path,
        capsule_manifest,
        demo_workspace("echo working\ntouch done\nexit 7\n"),
        ingest_addr=f"127.0.0.1:{port}",
        env={"FORGE_INGEST_DRAIN_SECONDS": "2"},
    )
    started = asyncio.get_running_loop().time()
    result = await run_capsule(launch, timeout=90)
    assert result.returncode == 7
    assert (launch.workspace_dir / "done").exists()
    # bounded by FORGE_INGEST_DRAIN_SECONDS=2, not the default 120 s (generous: a loaded machine)
    assert asyncio.get_running_loop().time() - started < 60
    assert "unreachable" in result.stderr
    assert "were not acknowledged by the console within 2 s" in result.stderr
    assert ingest.records == {}


async def test_a_console_that_refuses_the_attempt_is_not_retried_until_the_drain_deadline(
    tmp_path: pathlib.Path, capsule_manifest: dict[str, Any], ingest: FakeIngest
) -> None:
    # The console answers PERMISSION_DENIED (the token is not for this attempt, or the attempt
    # has ended): retrying cannot help, so the runner stops sending instead of waiting out a
    # 600 s drain, and exits with the command's code.
    launch = lay_out(
        tmp_path,
        capsule_manifest,
        demo_workspace("echo working\nexit 3\n"),
        ingest_addr=ingest.address,
        attempt_id="jtest0000000001.2",
        env={"FORGE_INGEST_DRAIN_SECONDS": "600"},
    )
    result = await run_capsule(launch, timeout=120)
    assert result.returncode == 3, result.stderr
    assert "the console refuses this attempt's records (PERMISSION_DENIED" in result.stderr
    assert "were not acknowledged" not in result.stderr
    assert ingest.records == {}


async def test_lost_acknowledgements_are_recovered_from_the_cursor(
    tmp_path: pathlib.Path, capsule_manifest: dict[str, Any], ingest: FakeIngest
) -> None:
    ingest.lose_acks = 3
    launch = lay_out(
        tmp_path,
        capsule_manifest,
        demo_workspace("python3 experiments/demo/train.py\n", **{"experiments/demo/train.py": RESTART_TRAIN_PY}),
        ingest_addr=ingest.address,
    )
    result = await run_capsule(launch)
    assert result.returncode == 0, result.stderr
    assert ingest.report_streams >= 4
    assert ingest.stdout() == [f"line {i}" for i in range(60)]
    assert [p.step for p in ingest.points()] == list(range(60))
    assert sorted(ingest.records) == list(range(1, len(ingest.records) + 1))


async def test_a_runner_failure_is_reported_and_exits_95(
    tmp_path: pathlib.Path, capsule_manifest: dict[str, Any], ingest: FakeIngest
) -> None:
    launch = lay_out(tmp_path, capsule_manifest, demo_workspace("touch ran\n"), ingest_addr=ingest.address)
    (launch.scratch_dir / "config.json").mkdir()  # the runner cannot write the run's config
    result = await run_capsule(launch)
    assert result.returncode == 95
    assert ingest.phases() == ["LIFECYCLE_PHASE_RUNNER_STARTED", "LIFECYCLE_PHASE_RUNNER_FAILED"]
    failed = ingest.lifecycle()[-1]
    assert failed.message.startswith("runner internal error: IsADirectoryError")
    assert failed.failure_class == 7  # FAILURE_CLASS_INFRA
    assert not (launch.workspace_dir / "ran").exists()


async def test_a_bad_ingest_address_exits_95_before_running_anything(
    tmp_path: pathlib.Path, capsule_manifest: dict[str, Any]
) -> None:
    launch = lay_out(tmp_path, capsule_manifest, demo_workspace("touch ran\n"), ingest_addr="nowhere")
    result = await run_capsule(launch)
    assert result.returncode == 95
    assert "starforge: runner cannot start: FORGE_INGEST_ADDR must be host:port, got 'nowhere'" in result.stderr
    assert not (launch.workspace_dir / "ran").exists()


async def test_non_numeric_metrics_become_a_system_warning(
    tmp_path: pathlib.Path, capsule_manifest: dict[str, Any], ingest: FakeIngest
) -> None:
    train_py = "import starforge\nfor i in range(3):\n    starforge.report(loss=0.5, acc='high')\n"
    launch = lay_out(
        tmp_path,
        capsule_manifest,
        demo_workspace("python3 experiments/demo/t.py\n", **{"experiments/demo/t.py": train_py}),
        ingest_addr=ingest.address,
    )
    result = await run_capsule(launch)
    assert result.returncode == 0, result.stderr
    assert [(p.step, p.name) for p in ingest.points()] == [(0, "loss"), (1, "loss"), (2, "loss")]
    warnings = [line for line in ingest.system() if "not a number" in line]
    assert warnings == ["starforge: metric 'acc' at step 0 is not a number ('high'); dropped (warned once per metric)"]


@pytest.mark.parametrize("version", ["3.10", "3.13"])
async def test_the_runner_runs_on_other_pythons(
    version: str, tmp_path: pathlib.Path, capsule_manifest: dict[str, Any], ingest: FakeIngest
) -> None:
    python = find_python(version)
    if python is None:
        pytest.skip(f"no Python {version} on this machine (pyenv or python{version} on PATH)")
    train_py = "import starforge, sys\nprint(sys.version_info[:2])\nstarforge.report(loss=1.5)\n"
    launch = lay_out(
        tmp_path,
        capsule_manifest,
        demo_workspace(f"{python} experiments/demo/t.py\n", **{"experiments/demo/t.py": train_py}),
        ingest_addr=ingest.address,
        env={"FORGE_PYTHON": python},
    )
    result = await run_capsule(launch)
    assert result.returncode == 0, result.stderr
    assert ingest.lifecycle()[0].details["python"].startswith(version + ".")
    major, minor = version.split(".")
    assert ingest.stdout() == [f"({major}, {minor})"]
    assert [(p.step, p.name, p.value) for p in ingest.points()] == [(0, "loss", 1.5)]


async def test_sigterm_while_draining_keeps_the_commands_exit_code(
    tmp_path: pathlib.Path, capsule_manifest: dict[str, Any], ingest: FakeIngest
) -> None:
    port = ingest.port
    await ingest.stop()
    launch = lay_out(
        tmp_path,
        capsule_manifest,
        demo_workspace("touch done\nexit 5\n"),
        ingest_addr=f"127.0.0.1:{port}",
        env={"FORGE_INGEST_DRAIN_SECONDS": "60"},
    )
    boot = Bootstrap(launch)
    await boot.start()
    try:
        await _wait_for((launch.workspace_dir / "done").exists, 60, "the command to run")
        await asyncio.sleep(1.0)
        started = asyncio.get_running_loop().time()
        boot.signal(signal.SIGTERM)
        result = await boot.result(30)
    finally:
        boot.kill()
    assert result.returncode == 5, result.stderr
    # SIGTERM cut the 60 s drain short
    assert asyncio.get_running_loop().time() - started < 45
    assert "SIGTERM while reporting the last records" in result.stderr
