"""The contract: buf lint is clean (STANDARD + COMMENTS: every element commented), gen/ is exactly what
`buf generate` produces. tests/unit/test_lint_rules.py proves buf lint and buf breaking fail on violations."""

from __future__ import annotations

import filecmp
import pathlib
import shutil
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUF = shutil.which("buf")  # conftest puts the venv on PATH


def _tree(path: pathlib.Path) -> dict[str, bytes]:
    return {
        p.relative_to(path).as_posix(): p.read_bytes()
        for p in sorted(path.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_buf_is_installed() -> None:
    assert BUF, "buf not on PATH: `make venv` installs buf-bin"


def test_buf_lint_clean() -> None:
    result = subprocess.run([BUF, "lint"], cwd=ROOT, capture_output=True, text=True)  # type: ignore[list-item]
    assert result.returncode == 0, result.stdout + result.stderr


def test_gen_is_fresh(tmp_path: pathlib.Path) -> None:
    result = subprocess.run(
        [BUF, "generate", "-o", str(tmp_path)],  # type: ignore[list-item]
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    fresh = _tree(tmp_path / "gen")
    committed = _tree(ROOT / "gen")
    stale = sorted(k for k in fresh.keys() | committed.keys() if fresh.get(k) != committed.get(k))
    assert not stale, f"gen/ is stale, run `make gen`: {stale[:10]}"
    assert filecmp  # keep import for readable diffs in future
