"""The contract: buf lint is clean (STANDARD + COMMENTS: every element commented), gen/ is exactly what
`buf generate` produces. tests/unit/test_lint_rules.py proves buf lint and buf breaking fail on violations."""

from __future__ import annotations

import ast
import filecmp
import pathlib
import re
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


def test_one_service_per_service_file() -> None:
    """Each service lives alone in `<name>_service.proto`; no other file declares one."""
    for proto in sorted((ROOT / "proto" / "starforge").rglob("*.proto")):
        services = re.findall(r"^service (\w+)", proto.read_text(), flags=re.MULTILINE)
        if proto.name.endswith("_service.proto"):
            assert len(services) == 1, f"{proto}: {services}"
            assert proto.name == _snake(services[0]) + ".proto", f"{proto} declares {services[0]}"
        else:
            assert services == [], f"{proto} declares {services}: services live in <name>_service.proto"


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def test_servicers_never_abort_themselves() -> None:
    """Servicers raise common.errors; only the ErrorInterceptor turns them into statuses."""
    servicers = [*(ROOT / "control" / "services").glob("*.py"), ROOT / "executor_svc" / "service.py"]
    servicers.append(ROOT / "forgelet" / "service.py")
    for path in servicers:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "abort":
                target = node.func.value
                assert not (isinstance(target, ast.Name) and target.id == "context"), f"{path}:{node.lineno}"
