"""Put gen/python and gen/pure on the venv's path with a .pth file.

Generated code imports itself as starforge_api.<area>.v1 (gen/python) and sfpb.* (gen/pure), so these
roots must be on sys.path. A .pth entry (not a meta-path finder) keeps a PYTHONPATH entry first,
which is what lets the capsule's `starforge` SDK shadow the generated namespace inside jobs.
"""

import pathlib
import sysconfig

root = pathlib.Path(__file__).resolve().parent.parent
site = pathlib.Path(sysconfig.get_paths()["purelib"])
(site / "starforge_gen.pth").write_text(f"{root / 'gen' / 'python'}\n{root / 'gen' / 'pure'}\n")
