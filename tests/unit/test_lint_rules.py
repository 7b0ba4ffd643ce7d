"""The lint rules of `make lint` fail on what they forbid.

`make layers` (import-linter, the contracts in pyproject.toml) runs on a copy of the packages with
one forbidden import added; `make contract` (buf lint with COMMENTS, buf breaking against
proto/release-baseline.binpb) on a copy of proto/ with a breaking change or an uncommented
element. Each copy is first checked clean, so a failure is the violation's.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("cli", "control", "executor_svc", "forgelet", "capsule", "common", "recipes", "tools/lint")
PROBE = "lint_probe.py"
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "demo_lab")


def make(target: str, cwd: pathlib.Path) -> subprocess.CompletedProcess[str]:
    """Run the repository's Makefile target `target` in `cwd` (a copy of the tree)."""
    return subprocess.run(
        ["make", "--no-print-directory", "-f", str(ROOT / "Makefile"), "-C", str(cwd), target],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def packages(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A copy of the Python packages and the import-linter configuration, clean."""
    tree = tmp_path_factory.mktemp("layers")
    shutil.copy(ROOT / "pyproject.toml", tree)
    (tree / "tools").mkdir()
    shutil.copy(ROOT / "tools" / "__init__.py", tree / "tools")
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tree / package, ignore=IGNORE)
    clean = make("layers", tree)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    return tree


@pytest.mark.parametrize(
    ("package", "statement", "contract"),
    [
        ("cli", "import control.app", "cli (sf) imports no server layer"),
        ("cli/commands", "import forgelet.node", "cli (sf) imports no server layer"),
        ("control", "from executor_svc.base import LABEL_JOB", "control imports neither the executors"),
        ("executor_svc/slurm", "from executor_svc.local import config", "the executor kinds do not import each other"),
        ("capsule/runner", "import yaml", "capsule/runner (runner.pex) imports only"),
        ("capsule/runner", "from .adapters import hf_stage", "capsule/runner (runner.pex) imports only"),
        ("forgelet", "import executor_svc.service", "forgelet imports of executor_svc only base and local"),
        ("common", "import recipes.params", "common/ imports no layer"),
    ],
)
def test_a_forbidden_import_fails_make_layers(
    packages: pathlib.Path, package: str, statement: str, contract: str
) -> None:
    probe = packages / package / PROBE
    probe.write_text(f'"""A forbidden import."""\n\n{statement}\n')
    try:
        result = make("layers", packages)
    finally:
        probe.unlink()
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert f"{contract}" in out.replace("\n", " ")
    assert "BROKEN" in out
    assert "lint_probe" in out


@pytest.fixture
def contract(tmp_path: pathlib.Path) -> pathlib.Path:
    """A copy of buf.yaml, proto/ and the release baseline, clean."""
    shutil.copy(ROOT / "buf.yaml", tmp_path)
    shutil.copytree(ROOT / "proto", tmp_path / "proto")
    clean = make("contract", tmp_path)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    return tmp_path


def _edit(path: pathlib.Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path} no longer holds {old!r}: pick another edit for this test"
    path.write_text(text.replace(old, new, 1))


def test_a_breaking_proto_change_fails_make_contract(contract: pathlib.Path) -> None:
    _edit(
        contract / "proto/starforge/job/v1/job_spec.proto",
        "optional int32 retry_budget = 17;",
        "optional int32 retry_limit = 17;",
    )
    result = make("contract", contract)
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert 'changed name from "retry_budget" to "retry_limit"' in out


def test_an_uncommented_element_fails_make_contract(contract: pathlib.Path) -> None:
    with (contract / "proto/starforge/job/v1/job_spec.proto").open("a") as f:
        f.write("\nmessage LintProbe {\n  string name = 1;\n}\n")
    result = make("contract", contract)
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert 'Message "LintProbe" should have a non-empty comment' in out
    assert 'Field "name" should have a non-empty comment' in out
