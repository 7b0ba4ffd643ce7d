"""Where this StarForge runs from: an installed wheel or a source checkout, and its version.

Installed (`pip install starforge-<version>-py3-none-any.whl`, see docs/deploy.md), the
code reads nothing but its own packages: the capsule (runner.pex, bootstrap.sh) and the built web
console are package data of `control` (control/bundled.py). In a source checkout (`make venv`:
an editable install plus gen/ on the path) the same code uses the checkout's build outputs
instead: build/capsule (rebuilt when stale) and web/dist. `checkout()` tells the two apart.
"""

from __future__ import annotations

import functools
import pathlib

DISTRIBUTION = "starforge"
# What a checkout has beside the packages and an installed wheel never has (site-packages holds
# no pyproject.toml, and the generated code is installed as top-level packages, not under gen/).
_MARKERS = ("pyproject.toml", "gen/pure/sfpb/__init__.py", "capsule/build.py")


@functools.cache
def checkout() -> pathlib.Path | None:
    """The root of the source checkout these modules were imported from; None when installed."""
    root = pathlib.Path(__file__).resolve().parents[1]
    return root if all((root / marker).is_file() for marker in _MARKERS) else None


@functools.cache
def version() -> str:
    """The version of StarForge: pyproject.toml's `version`, read from the installed metadata
    (or from pyproject.toml itself in a checkout that was never installed). Its modules are
    imported here: `checkout()` is asked on every `sf submit` (recipes.framework_keys), which
    needs neither."""
    import tomllib
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        pass
    root = checkout()
    if root is not None:
        try:
            return str(tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"])
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            pass
    return "0.0.0+unknown"
