"""bootstrap.sh's checks, run for real with `sh` against capsules laid out in a temp dir.

The runner here is a stand-in Python script named like a pex, so these tests need no build and no
sockets; the real runner is exercised in tests/integration/capsule.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

import pytest

from capsule.layout import FileEntry, RunInfo, capsule_json, describe_file, describe_tree

REPO = pathlib.Path(__file__).resolve().parents[3]
BOOTSTRAP = REPO / "capsule" / "bootstrap.sh"
RUNNER = "runner-0123456789abcdef.pex"
FAKE_RUNNER = """\
import os, sys
print("RUNNER OK isolated=%d pex_root=%s" % (sys.flags.isolated, os.environ.get("PEX_ROOT")))
"""
SHELLS = [s for s in ("sh", "dash", "bash", "busybox") if shutil.which(s)]


def make_capsule(
    root: pathlib.Path, workspace: dict[str, bytes], *, mutate: object = None
) -> tuple[dict[str, str], bytes]:
    capsule = root / "capsule"
    ws = root / "workspace"
    capsule.mkdir()
    shutil.copyfile(BOOTSTRAP, capsule / "bootstrap.sh")
    (capsule / RUNNER).write_text(FAKE_RUNNER)
    for rel, content in workspace.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_bytes(content)
    ws.mkdir(exist_ok=True)
    data = capsule_json(
        job_id="j1",
        attempt_id="j1.1",
        attempt_number=1,
        runner=RUNNER,
        capsule_files=[describe_file(capsule, "bootstrap.sh"), describe_file(capsule, RUNNER)],
        workspace_files=describe_tree(ws),
        run=RunInfo(method="custom/custom", adapter="custom", experiment="demo", entrypoint="train.sh"),
    )
    if callable(mutate):
        doc = json.loads(data)
        mutate(doc)
        data = json.dumps(doc).encode()
    (capsule / "capsule.json").write_bytes(data)
    env = {
        "PATH": os.environ["PATH"],
        "FORGE_CAPSULE_DIR": str(capsule),
        "FORGE_WORKSPACE_DIR": str(ws),
        "FORGE_CAPSULE_SHA256": hashlib.sha256(data).hexdigest(),
        "FORGE_SCRATCH_DIR": str(root),
    }
    return env, data


def run(env: dict[str, str], shell: str = "sh") -> subprocess.CompletedProcess[str]:
    path = shutil.which(shell)
    assert path is not None
    argv = [path, "sh"] if shell == "busybox" else [path]
    return subprocess.run(
        [*argv, env["FORGE_CAPSULE_DIR"] + "/bootstrap.sh"], env=env, capture_output=True, text=True, timeout=60
    )


def failure(text: str) -> str:
    return f"starforge: capsule integrity check failed: {text}"


@pytest.mark.parametrize("shell", SHELLS)
def test_a_good_capsule_execs_the_runner_isolated(tmp_path: pathlib.Path, shell: str) -> None:
    env, _ = make_capsule(tmp_path, {"experiments/demo/train.sh": b"echo hi\n", "data/a.bin": bytes(range(256))})
    proc = run(env, shell)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"RUNNER OK isolated=1 pex_root={tmp_path}/.pex"
    assert proc.stderr == ""


def test_capsule_json_must_match_the_trust_root(tmp_path: pathlib.Path) -> None:
    env, data = make_capsule(tmp_path, {"a": b"a"})
    env["FORGE_CAPSULE_SHA256"] = "0" * 64
    proc = run(env)
    assert proc.returncode == 97
    found = hashlib.sha256(data).hexdigest()
    assert proc.stderr.splitlines() == [failure(f"capsule/capsule.json: expected sha256 {'0' * 64}, found {found}")]
    assert "RUNNER OK" not in proc.stdout


def test_a_changed_workspace_file_is_named_with_both_digests(tmp_path: pathlib.Path) -> None:
    env, _ = make_capsule(tmp_path, {"experiments/demo/train.sh": b"echo hi\n", "b.txt": b"b"})
    (pathlib.Path(env["FORGE_WORKSPACE_DIR"]) / "experiments/demo/train.sh").write_bytes(b"rm -rf /\n")
    proc = run(env)
    assert proc.returncode == 97
    expected = hashlib.sha256(b"echo hi\n").hexdigest()
    found = hashlib.sha256(b"rm -rf /\n").hexdigest()
    assert proc.stderr.splitlines() == [
        failure(f"workspace/experiments/demo/train.sh: expected sha256 {expected}, found {found}")
    ]
    assert proc.stdout == ""


def test_missing_files_and_a_changed_runner_are_all_reported(tmp_path: pathlib.Path) -> None:
    env, _ = make_capsule(tmp_path, {"x/one": b"1", "x/two": b"2"})
    (pathlib.Path(env["FORGE_WORKSPACE_DIR"]) / "x/one").unlink()
    runner = pathlib.Path(env["FORGE_CAPSULE_DIR"]) / RUNNER
    good = hashlib.sha256(runner.read_bytes()).hexdigest()
    runner.write_text("print('evil')\n")
    proc = run(env)
    assert proc.returncode == 97
    bad = hashlib.sha256(b"print('evil')\n").hexdigest()
    assert proc.stderr.splitlines() == [
        failure(f"capsule/{RUNNER}: expected sha256 {good}, found {bad}"),
        failure("workspace/x/one: missing"),
    ]


def test_a_path_escaping_its_root_is_refused(tmp_path: pathlib.Path) -> None:
    def escape(doc: dict) -> None:  # type: ignore[type-arg]
        doc["files"].append({"root": "workspace", "path": "../capsule/bootstrap.sh", "sha256": "0" * 64})

    env, _ = make_capsule(tmp_path, {"a": b"a"}, mutate=escape)
    proc = run(env)
    assert proc.returncode == 97
    assert proc.stderr.startswith(failure("capsule/capsule.json: bad file entry"))


def test_the_runner_must_be_a_listed_file(tmp_path: pathlib.Path) -> None:
    def unlist(doc: dict) -> None:  # type: ignore[type-arg]
        doc["files"] = [f for f in doc["files"] if f["path"] != RUNNER]

    env, _ = make_capsule(tmp_path, {"a": b"a"}, mutate=unlist)
    proc = run(env)
    assert proc.returncode == 97
    assert proc.stderr.splitlines() == [failure(f"capsule/{RUNNER}: not listed in capsule.json")]


def test_missing_environment_is_an_integrity_failure(tmp_path: pathlib.Path) -> None:
    env, _ = make_capsule(tmp_path, {"a": b"a"})
    del env["FORGE_CAPSULE_SHA256"]
    proc = run(env | {"FORGE_CAPSULE_DIR": env["FORGE_CAPSULE_DIR"]})
    assert proc.returncode == 97
    assert "FORGE_CAPSULE_SHA256 must be set" in proc.stderr


def test_no_python_in_the_image_exits_98(tmp_path: pathlib.Path) -> None:
    env, _ = make_capsule(tmp_path, {"a": b"a"})
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    env["PATH"] = str(empty)
    proc = subprocess.run(
        ["/bin/sh", env["FORGE_CAPSULE_DIR"] + "/bootstrap.sh"], env=env, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 98
    assert proc.stderr.startswith("starforge: no python3 or python in the image")


def test_a_python_older_than_310_exits_98(tmp_path: pathlib.Path) -> None:
    env, _ = make_capsule(tmp_path, {"a": b"a"})
    # A Python 3.8 stand-in: the real interpreter, reporting 3.8, runs what bootstrap gives it
    # (`-I -c PROGRAM PY`), so that the program's own first check is what refuses it.
    old = tmp_path / "python3.8"
    old.write_text(
        f"#!/bin/sh\nexec {sys.executable} -I -c "
        '\'import sys; sys.version_info = (3, 8, 0, "final", 0); p = sys.argv[1]; '
        'sys.argv = ["-c"] + sys.argv[2:]; exec(p)\' "$3" "$4"\n'
    )
    old.chmod(0o755)
    proc = run(env | {"FORGE_PYTHON": str(old)})
    assert proc.returncode == 98
    assert proc.stderr.strip() == (
        f"starforge: {old} is Python 3.8; the StarForge runner needs Python 3.10 or newer (or set FORGE_PYTHON)"
    )
    proc = run(env | {"FORGE_PYTHON": str(tmp_path / "nope")})
    assert proc.returncode == 98
    assert "is not an executable Python" in proc.stderr


def test_forge_python_selects_the_interpreter(tmp_path: pathlib.Path) -> None:
    env, _ = make_capsule(tmp_path, {"a": b"a"})
    proc = run(env | {"FORGE_PYTHON": sys.executable, "PATH": "/nonexistent"})
    assert proc.returncode == 0, proc.stderr
    assert "RUNNER OK" in proc.stdout


def test_10000_files_and_200_mb_verify(tmp_path: pathlib.Path) -> None:
    """A large workspace verifies completely. How fast is the capsule-start benchmark's business
    (bench/), not a test's: a timed assertion here failed on a loaded machine."""
    workspace = {f"d{i // 500:02d}/f{i:05d}.txt": f"file {i}\n".encode() for i in range(10_000)}
    blob = os.urandom(1 << 20)
    workspace |= {f"weights/shard{i:03d}.bin": blob[i:] + blob[:i] for i in range(200)}
    env, _ = make_capsule(tmp_path, workspace)
    run(env)  # warm the page cache, as a freshly materialised workspace would be
    started = time.monotonic()
    proc = run(env)
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    print(f"verified 10,200 files / 200 MB in {elapsed:.2f} s")
    assert "integrity check failed" not in proc.stderr


def test_capsule_files_entries_match_the_layout(tmp_path: pathlib.Path) -> None:
    """FileEntry keeps executable bits: the checker ignores modes, the layout still records them."""
    (tmp_path / "x.sh").write_text("echo\n")
    (tmp_path / "x.sh").chmod(0o755)
    assert describe_file(tmp_path, "x.sh") == FileEntry(
        "x.sh", hashlib.sha256(b"echo\n").hexdigest(), 5, executable=True
    )


def _offered_venv(root: pathlib.Path, env: dict[str, str], runner: str = RUNNER) -> pathlib.Path:
    """A stand-in runner venv (bin/python, pex) named to bootstrap.sh as the executor names one."""
    venv = root / "shared" / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    (venv / "pex").write_text('import sys\nprint("VENV RAN isolated=%d" % sys.flags.isolated)\n')
    env.update(FORGE_PYTHON=sys.executable, FORGE_PEX_PYTHON=sys.executable, FORGE_PEX_VENV=str(venv))
    env["FORGE_PEX_RUNNER"] = runner
    return venv


root_only = pytest.mark.skipif(os.geteuid() != 0, reason="the venv must be root-owned: needs root")


@root_only
def test_the_offered_venv_of_this_runner_is_exec_d_directly(tmp_path: pathlib.Path) -> None:
    env, _ = make_capsule(tmp_path, {"a": b"a"})
    _offered_venv(tmp_path, env)
    proc = run(env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "VENV RAN isolated=1"


@root_only
def test_a_tampered_runner_is_refused_before_the_offered_venv_runs(tmp_path: pathlib.Path) -> None:
    env, _ = make_capsule(tmp_path, {"a": b"a"})
    _offered_venv(tmp_path, env)
    (pathlib.Path(env["FORGE_CAPSULE_DIR"]) / RUNNER).write_text("print('tampered')\n")
    proc = run(env)
    assert proc.returncode == 97
    assert f"capsule/{RUNNER}: expected sha256" in proc.stderr
    assert proc.stdout == ""


@root_only
def test_a_venv_someone_else_can_change_is_not_used(tmp_path: pathlib.Path) -> None:
    """What a job could offer through its own environment: a venv it owns, or one in a directory it
    may write. The pex itself runs instead."""
    env, _ = make_capsule(tmp_path, {"a": b"a"})
    venv = _offered_venv(tmp_path, env)
    os.chown(venv / "pex", 65534, 65534)
    proc = run(env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("RUNNER OK")
    os.chown(venv / "pex", 0, 0)
    venv.parent.chmod(0o777)
    proc = run(env)
    assert proc.stdout.startswith("RUNNER OK"), proc.stderr


@root_only
def test_the_venv_of_another_runner_or_interpreter_is_not_used(tmp_path: pathlib.Path) -> None:
    env, _ = make_capsule(tmp_path, {"a": b"a"})
    _offered_venv(tmp_path, env, runner="runner-fedcba9876543210.pex")
    assert run(env).stdout.startswith("RUNNER OK")
    env["FORGE_PEX_RUNNER"] = RUNNER
    env["FORGE_PEX_PYTHON"] = "/usr/bin/python-other"
    assert run(env).stdout.startswith("RUNNER OK")
