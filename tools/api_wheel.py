"""The Python client package: `starforge_api`, the code `buf generate` makes from proto/, as a wheel.

    python -m tools.api_wheel --out dist

writes `starforge_api-<version>-py3-none-any.whl` (distribution `starforge-api`, the platform's
version): every message, `.pyi` stub and service stub of gen/python/starforge_api, importable as
`starforge_api.<area>.v1`, requiring only grpcio, protobuf and the Google error-detail protos. A team
writing its own Python client installs this and nothing else of StarForge (examples/python-client);
the platform wheel depends on it at the same version instead of holding a second copy.

The wheel is written with zipfile (fixed timestamps and order: the same protos give the same bytes),
as capsule/sdk_wheel.py writes the SDK's.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tomllib

from capsule.sdk_wheel import _record_line, write_wheel

REPO = pathlib.Path(__file__).resolve().parents[1]
SOURCE = REPO / "gen" / "python" / "starforge_api"
DIST = "starforge_api"
NAME = "starforge-api"
# What the generated code imports (grpc, google.protobuf), and what decoding the rich error details
# takes (google.rpc's messages, grpc_status); the bounds are the platform's own.
REQUIRES = ("grpcio>=1.85,<2", "grpcio-status>=1.85,<2", "protobuf>=6", "googleapis-common-protos>=1.70")


def version() -> str:
    return str(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"])


def requirement() -> str:
    """What the platform wheel requires of this one: the same version, exactly."""
    return f"{NAME}=={version()}"


def wheel_files(source: pathlib.Path, version: str) -> list[tuple[str, bytes]]:
    """(path in the wheel, bytes), RECORD last."""
    sources = sorted(p for p in source.rglob("*") if p.is_file() and p.suffix in {".py", ".pyi"})
    if not any(p.name.endswith("_pb2.py") for p in sources):
        raise SystemExit(f"{source}: no generated code (run `make gen`)")
    files = [(f"{DIST}/{p.relative_to(source).as_posix()}", p.read_bytes()) for p in sources]
    files.append((f"{DIST}/py.typed", b""))
    info = f"{DIST}-{version}.dist-info"
    metadata = (
        "Metadata-Version: 2.1\n"
        f"Name: {NAME}\n"
        f"Version: {version}\n"
        "Summary: StarForge's gRPC API for Python: the messages and service stubs generated from its protos.\n"
        "Requires-Python: >=3.11\n" + "".join(f"Requires-Dist: {r}\n" for r in REQUIRES)
    )
    wheel = "Wheel-Version: 1.0\nGenerator: starforge tools.api_wheel\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files += [
        (f"{info}/METADATA", metadata.encode()),
        (f"{info}/WHEEL", wheel.encode()),
        (f"{info}/top_level.txt", f"{DIST}\n".encode()),
    ]
    record = "\n".join([*(_record_line(n, d) for n, d in files), f"{info}/RECORD,,"]) + "\n"
    return [*files, (f"{info}/RECORD", record.encode())]


def build(out: pathlib.Path, source: pathlib.Path = SOURCE) -> pathlib.Path:
    v = version()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{DIST}-{v}-py3-none-any.whl"
    write_wheel(path, wheel_files(source, v))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.api_wheel", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=REPO / "dist", help="directory for the wheel")
    args = parser.parse_args(argv)
    print(build(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
