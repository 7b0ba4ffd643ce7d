"""`make demo`: a real training job, submitted with `sf` and followed live to SUCCEEDED.

Everything happens in a temporary directory: the embedded console (`sf up --detach`), a lab with
one custom/custom experiment whose train.sh trains a logistic regression with numpy (loss falls,
a checkpoint goes to FORGE_OUT_DIR), the submission, the live log, the final metrics. The console
is stopped at the end (by its PID, through `sf down`), whatever happened.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
LAB_FILES = REPO / "tools" / "demo_lab"
SF = str(pathlib.Path(sys.executable).parent / "sf")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def say(text: str) -> None:
    print(f"\n\033[1;36m==> {text}\033[0m", flush=True)


def run(cmd: list[str], env: dict[str, str], cwd: pathlib.Path | None = None, capture: bool = False) -> str:
    print("$ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, env=env, cwd=cwd, text=True, stdout=subprocess.PIPE if capture else None, check=False)
    if r.returncode != 0:
        raise SystemExit(f"demo: `{' '.join(cmd)}` exited with {r.returncode}")
    return r.stdout or ""


def main() -> int:
    root = pathlib.Path(tempfile.mkdtemp(prefix="starforge-demo-"))
    state, lab = root / "console", root / "lab"
    env = dict(
        os.environ,
        STARFORGE_CLIENT_CONFIG=str(root / "client.yaml"),
        STARFORGE_HOME=str(state),
        GIT_AUTHOR_NAME="StarForge Demo",
        GIT_AUTHOR_EMAIL="demo@starforge.invalid",
        GIT_COMMITTER_NAME="StarForge Demo",
        GIT_COMMITTER_EMAIL="demo@starforge.invalid",
    )
    env["PATH"] = f"{pathlib.Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("STARFORGE_CONSOLE", None)
    env.pop("STARFORGE_TOKEN", None)
    started = False
    t0 = time.monotonic()
    try:
        say("starting the embedded console (control plane + local executor)")
        run([SF, "up", "--state-dir", str(state), "--listen", f"127.0.0.1:{free_port()}", "--detach"], env)
        started = True

        say("making a lab with one experiment (custom/custom)")
        run([SF, "init", str(lab), "--name", "demo-lab"], env)
        run(["git", "init", "-q"], env, cwd=lab)
        run([SF, "new", "logreg", "--method", "custom/custom"], env, cwd=lab)
        exp = lab / "experiments" / "logreg"
        for name in ("train.py", "train.sh", "config.yaml"):
            shutil.copy2(LAB_FILES / name, exp / name)
        run(["git", "add", "-A"], env, cwd=lab)
        run(["git", "commit", "-qm", "logistic regression demo"], env, cwd=lab)

        say("submitting and following the job live")
        t_submit = time.monotonic()
        run([SF, "submit", "logreg", "--profile", "cpu", "--follow"], env, cwd=lab)
        elapsed = time.monotonic() - t_submit

        say("the job")
        run([SF, "job", "status", "latest"], env, cwd=lab)
        say("its metrics")
        run([SF, "job", "metrics", "latest"], env, cwd=lab)
        job = json.loads(run([SF, "-o", "json", "job", "status", "latest"], env, cwd=lab, capture=True))
        job = job.get("job", job)
        out_dir = pathlib.Path(job.get("out_dir", ""))
        checkpoints = sorted((out_dir / "checkpoints").glob("step-*.npz"), key=lambda p: int(p.stem.split("-")[1]))
        if job.get("state") != "JOB_STATE_SUCCEEDED" or not checkpoints:
            raise SystemExit(f"demo: expected SUCCEEDED with a checkpoint, got {job.get('state')} in {out_dir}")
        say(
            f"SUCCEEDED in {elapsed:.1f}s from submit ({time.monotonic() - t0:.1f}s in all); "
            f"final checkpoint: {checkpoints[-1]}"
        )
        return 0
    finally:
        if started:
            say("stopping the console")
            subprocess.run([SF, "down", "--state-dir", str(state)], env=env, check=False)
        print(f"(demo files are in {root})")


if __name__ == "__main__":
    sys.exit(main())
