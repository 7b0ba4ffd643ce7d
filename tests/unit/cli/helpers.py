"""Helpers for the CLI unit tests: git labs in tmp_path."""

from __future__ import annotations

import json
import pathlib
import subprocess

LOCK = {
    "method": "custom/custom",
    "version": "1.0.0",
    "digest": "ab" * 32,
    "framework_version": "1",
    "runtime_id": "host",
}


def git(root: pathlib.Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout


def write(path: pathlib.Path, text: str, *, mode: int | None = None) -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if mode is not None:
        path.chmod(mode)
    return path


def make_lab(root: pathlib.Path, *, extra_yaml: str = "", commit: bool = True) -> pathlib.Path:
    """A lab with one custom/custom experiment `demo`, committed to a fresh git repository."""
    root.mkdir(parents=True, exist_ok=True)
    write(root / "starforge.yaml", f'project: "@alice/lab"\n{extra_yaml}')
    write(root / ".gitignore", ".starforge/\n")
    write(root / "experiments/demo/config.yaml", "image: busybox:1\nobservability: platform\nlr: 0.1\n")
    write(root / "experiments/demo/recipe.lock.json", json.dumps(LOCK))
    write(root / "experiments/demo/train.sh", "#!/bin/sh\necho hi\n", mode=0o755)
    write(root / "src/model.py", "print('model')\n")
    git(root, "init", "-q", "-b", "main")
    if commit:
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "init")
    return root
