"""`python -m capsule.sdk_wheel --out DIR`: the `starforge` SDK as a pure-Python wheel.

Images that run in external observability mode get no SDK on PYTHONPATH from the runner; they
install this wheel (`pip install starforge_sdk-<version>-py3-none-any.whl`). The SDK is one
standard-library-only module, so the wheel is written here with zipfile (no build backend to
install): fixed timestamps and order, so the same sources give the same bytes.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import pathlib
import re
import sys
import zipfile

SDK_DIR = pathlib.Path(__file__).resolve().parent / "sdk" / "starforge"
DIST = "starforge_sdk"
# zip's earliest date; every entry carries it so that the wheel is reproducible.
EPOCH = (1980, 1, 1, 0, 0, 0)
_VERSION_RE = re.compile(r'^__version__ = "([0-9]+(?:\.[0-9]+)*)"$', re.M)


def sdk_version(source: str) -> str:
    match = _VERSION_RE.search(source)
    if match is None:
        raise SystemExit(f'{SDK_DIR / "__init__.py"}: no __version__ = "X.Y.Z" line')
    return match.group(1)


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def wheel_files(source: str, version: str) -> list[tuple[str, bytes]]:
    """(path in the wheel, bytes), RECORD last."""
    info = f"{DIST}-{version}.dist-info"
    metadata = (
        "Metadata-Version: 2.1\n"
        "Name: starforge-sdk\n"
        f"Version: {version}\n"
        "Summary: What training code uses to talk to the StarForge platform (standard library only).\n"
        "Requires-Python: >=3.8\n"
    )
    wheel = "Wheel-Version: 1.0\nGenerator: starforge capsule.sdk_wheel\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files = [
        ("starforge/__init__.py", source.encode()),
        (f"{info}/METADATA", metadata.encode()),
        (f"{info}/WHEEL", wheel.encode()),
        (f"{info}/top_level.txt", b"starforge\n"),
    ]
    record = "\n".join([*(_record_line(n, d) for n, d in files), f"{info}/RECORD,,"]) + "\n"
    return [*files, (f"{info}/RECORD", record.encode())]


def build(out: pathlib.Path) -> pathlib.Path:
    source = (SDK_DIR / "__init__.py").read_text(encoding="utf-8")
    version = sdk_version(source)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{DIST}-{version}-py3-none-any.whl"
    write_wheel(path, wheel_files(source, version))
    return path


def write_wheel(path: pathlib.Path, files: list[tuple[str, bytes]]) -> None:
    """Write `files` (name, bytes) as the zip at `path`, reproducibly: fixed timestamps and modes,
    in the order given; replaced whole, never left half-written."""
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in files:
            entry = zipfile.ZipInfo(name, EPOCH)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(entry, data)
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m capsule.sdk_wheel", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="build/sdk", help="directory for the wheel (default: build/sdk)")
    args = parser.parse_args(argv)
    print(build(pathlib.Path(args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
