"""Finding the other CPython versions the runner supports (pyenv builds or pythonX.Y on PATH)."""

from __future__ import annotations

import os
import pathlib
import shutil


def find_python(version: str) -> str | None:
    """A real interpreter binary (pyenv shims need pyenv's environment, so they are skipped)."""
    root = pathlib.Path(os.environ.get("PYENV_ROOT", pathlib.Path.home() / ".pyenv")) / "versions"
    for candidate in sorted(root.glob(f"{version}.*/bin/python{version}"), reverse=True):
        if os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which(f"python{version}")
    if found and "/shims/" not in found:
        return found
    return None
