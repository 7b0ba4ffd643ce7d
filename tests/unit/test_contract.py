"""The contract: buf lint is clean (STANDARD + COMMENTS: every element commented), gen/ is exactly what
`buf generate` (then tools/gen_python_package.py) produces. tests/unit/test_lint_rules.py proves buf
lint and buf breaking fail on violations."""

from __future__ import annotations

import ast
import filecmp
import pathlib
import re
import shutil
import subprocess

import pytest

from tools import gen_python_package

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
    assert gen_python_package.main(tmp_path / "gen" / "python") == 0
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


FILE_OPTIONS = ("go_package", "java_package", "java_multiple_files", "csharp_namespace")


@pytest.mark.parametrize("proto", sorted((ROOT / "proto" / "starforge").rglob("*.proto")), ids=lambda p: p.name)
def test_every_file_names_its_package_for_other_languages(proto: pathlib.Path) -> None:
    """Go, Java and C# clients generate from proto/ without passing per-file flags."""
    text = proto.read_text()
    missing = [o for o in FILE_OPTIONS if f"\noption {o} = " not in text]
    assert missing == [], f"{proto.name} lacks {missing}"
    assert "\noption java_multiple_files = true;" in text


def test_error_detail_protos_ship_with_the_contract() -> None:
    """A client in any language decodes grpc-status-details-bin with the protos in proto/."""
    result = subprocess.run(
        [BUF, "build", "-o", "-#format=binpb"],  # type: ignore[list-item]
        cwd=ROOT,
        capture_output=True,
    )
    assert result.returncode == 0, result.stderr.decode()
    from google.protobuf import descriptor_pb2

    files = {f.name: f for f in descriptor_pb2.FileDescriptorSet.FromString(result.stdout).file}
    assert {"google/rpc/status.proto", "google/rpc/error_details.proto"} <= files.keys()
    details = {m.name for m in files["google/rpc/error_details.proto"].message_type}
    assert {"ErrorInfo", "BadRequest", "PreconditionFailure", "QuotaFailure", "RetryInfo"} <= details


def test_api_reference_is_fresh() -> None:
    """docs/api-reference.md is what tools/api_reference.py renders from the proto comments."""
    from tools import api_reference

    committed = (ROOT / "docs" / "api-reference.md").read_text()
    assert committed == api_reference.render(), "docs/api-reference.md is stale: run `python -m tools.api_reference`"


def test_every_rpc_documents_its_errors() -> None:
    """Each RPC's comment (or its service's) says which status codes it returns."""
    from tools import api_reference

    documented = api_reference.documented_errors()
    assert len(documented) > 50
    assert [rpc for rpc, codes in documented.items() if not codes] == []


def test_api_md_explains_every_error_reason() -> None:
    """docs/api.md's error table names every ErrorReason a client may receive."""
    from starforge_api.control.v1 import error_reason_pb2

    text = (ROOT / "docs" / "api.md").read_text()
    names = [v.name.removeprefix("ERROR_REASON_") for v in error_reason_pb2.ErrorReason.DESCRIPTOR.values][1:]
    assert [n for n in names if f"| `{n}` |" not in text] == []
