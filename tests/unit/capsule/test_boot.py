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
