"""The contract: buf lint is clean, gen/ is exactly what `buf generate` produces, every element is commented."""

from __future__ import annotations

import filecmp
import pathlib
import shutil
import subprocess

import pytest

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


def _undocumented(path: pathlib.Path) -> list[str]:
    """Names of messages, fields, enums, values, services and RPCs with no leading comment."""
    from google.protobuf import descriptor_pb2

    result = subprocess.run(
        [BUF, "build", "--path", str(path.relative_to(ROOT)), "-o", "-#format=binpb"],  # type: ignore[list-item]
        cwd=ROOT,
        capture_output=True,
    )
    assert result.returncode == 0, result.stderr.decode()
    images = descriptor_pb2.FileDescriptorSet.FromString(result.stdout)
    missing: list[str] = []
    for f in images.file:
        if f.name != path.relative_to(ROOT / "proto").as_posix():
            continue
        for loc in f.source_code_info.location:
            # paths of interest: message (4,i), field (4,i,2,j), enum (5,i), value (5,i,2,j),
            # nested enum values, service (6,i), method (6,i,2,j)
            p = list(loc.path)
            interesting = (len(p) == 2 and p[0] in (4, 5, 6)) or (len(p) == 4 and p[0] in (4, 5, 6) and p[2] == 2)
            if interesting and not loc.leading_comments.strip():
                missing.append(f"{f.name}:{loc.span[0] + 1}")
    return missing


@pytest.mark.parametrize("proto", sorted((ROOT / "proto" / "starforge").rglob("*.proto")), ids=lambda p: p.name)
def test_every_element_is_commented(proto: pathlib.Path) -> None:
    assert _undocumented(proto) == []


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
    from starforge.control.v1 import error_reason_pb2

    text = (ROOT / "docs" / "api.md").read_text()
    names = [v.name.removeprefix("ERROR_REASON_") for v in error_reason_pb2.ErrorReason.DESCRIPTOR.values][1:]
    assert [n for n in names if f"| `{n}` |" not in text] == []
