"""Move the generated grpcio code from gen/python/starforge to gen/python/starforge_api.

protoc's Python generator names a module after its .proto path (starforge/control/v1/x.proto ->
starforge.control.v1.x_pb2) and has no option to prefix it. The top-level name `starforge` belongs to
the SDK that training code imports, so after `buf generate` this step moves the tree and rewrites the
generated imports (and the module names passed to the protobuf builder). Proto package and file names
— what goes on the wire and into the descriptor pool — are left alone.

Idempotent: run on an already-moved tree it changes nothing.
"""

from __future__ import annotations

import pathlib
import re
import shutil
import sys

OLD = "starforge"
NEW = "starforge_api"
# `from starforge.x` / `import starforge.x` (statements), and 'starforge.x.v1.y_pb2' (module names).
_STATEMENT = re.compile(rf"^(\s*(?:from|import) ){OLD}(?=[.\s])", re.MULTILINE)
_MODULE_NAME = re.compile(rf"(['\"]){OLD}(\.[a-z_]+\.v\d+\.[a-z_0-9]+_pb2(?:_grpc)?['\"])")


def rewrite(text: str) -> str:
    return _MODULE_NAME.sub(rf"\g<1>{NEW}\g<2>", _STATEMENT.sub(rf"\g<1>{NEW}", text))


def main(root: pathlib.Path) -> int:
    old, new = root / OLD, root / NEW
    if old.exists():
        if new.exists():
            shutil.rmtree(new)
        old.rename(new)
    for path in sorted(new.rglob("*")):
        if path.suffix in {".py", ".pyi"}:
            text = path.read_text()
            changed = rewrite(text)
            if changed != text:
                path.write_text(changed)
    return 0


if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "gen/python")))
