"""The runner's entry (capsule/runner/boot.py): what it imports before the training command starts.

Run in a fresh isolated interpreter each, as runner.pex's venv would start it.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[3]
PROBE = """
import json, sys
sys.path[:0] = {paths!r}
from capsule.runner import boot
boot.preload_messages_runtime()
boot.preload_client_stubs()
early = sorted(m for m in ("importlib.metadata", "grpclib.server", "grpclib.protocol", "h2") if m in sys.modules)
from sfpb.starforge.ingest import v1 as ingest  # the generated messages and client stub import fine
import betterproto2, betterproto2.grpclib, importlib.metadata
print(json.dumps({{
    "early": early,
    "version": betterproto2.__version__,
    "real_version": importlib.metadata.version("betterproto2"),
    "stub_is_client": ingest.IngestServiceStub.__mro__[1] is betterproto2.grpclib.ServiceStub,
    "server_loaded": "grpclib.server" in sys.modules,
}}))
"""


def _probe() -> dict[str, object]:
    paths = [str(REPO), str(REPO / "gen" / "pure")]
    proc = subprocess.run(
        [sys.executable, "-I", "-c", PROBE.format(paths=paths)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def test_the_messages_runtime_comes_without_importlib_metadata_or_a_grpc_server() -> None:
    result = _probe()
    assert result["early"] == [], result
    assert result["version"] == result["real_version"], result  # the same answer importlib.metadata gives
    assert result["stub_is_client"] is True, result
    assert result["server_loaded"] is False, result


LAZY_PROBE = """
import json, sys
sys.path[:0] = {paths!r}
from capsule.runner import boot
for name in boot.LAZY:
    boot.import_lazily(name)
from sfpb.google.protobuf import Timestamp  # its module says `import dateutil.parser`
early = "dateutil.parser._parser" in sys.modules
parsed = Timestamp.from_dict("2026-01-02T03:04:05Z").seconds  # the one use: the real parser, loaded now
import dateutil.parser
print(json.dumps({{
    "early": early,
    "parsed": parsed,
    "real": dateutil.parser.isoparse.__module__,
    "in_modules": type(sys.modules["dateutil.parser"].__dict__.get("isoparse")).__name__,
}}))
"""


def test_dateutil_parser_is_imported_on_first_use_only() -> None:
    paths = [str(REPO), str(REPO / "gen" / "pure")]
    proc = subprocess.run(
        [sys.executable, "-I", "-c", LAZY_PROBE.format(paths=paths)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["early"] is False, result
    assert result["parsed"] == 1767323045, result
    assert result["real"] == "dateutil.parser.isoparser", result  # the real module, not the stand-in
    assert result["in_modules"] == "method", result


def test_a_stand_in_is_not_made_for_a_module_that_is_imported_already() -> None:
    from capsule.runner import boot

    before = sys.modules["json"]
    boot.import_lazily("json")
    assert sys.modules["json"] is before
    boot.import_lazily("no_such_package_here.parser")  # its parent cannot be imported: nothing done
    assert "no_such_package_here.parser" not in sys.modules
