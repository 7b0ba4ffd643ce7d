"""The files the control plane serves that are built, not written: the capsule and the web console.

An installed wheel carries them as package data of `control` (`make dist` builds them and puts
them there, see tools/build_dist.py):

    control/assets/capsule/   manifest.json, bootstrap.sh, runner-<digest>.pex, sdk/starforge/...
    control/assets/web/       the built web console (index.html, app.js, ...)

A source checkout has no control/assets; it uses its own build outputs (`make capsule` into
build/capsule, `make web` into web/dist). The packaged files win when present, so an installed
StarForge never reads a source tree, and a checkout behaves as it always did.
"""

from __future__ import annotations

import importlib.resources
import pathlib

from common.source import checkout

ASSETS = "assets"
CAPSULE = "capsule"
WEB = "web"
# What a relative capsule_dir means in a checkout (and what `make capsule` builds).
DEV_CAPSULE_DIR = pathlib.Path("build") / "capsule"


def _packaged(name: str) -> pathlib.Path:
    root = importlib.resources.files(__package__ or "control").joinpath(ASSETS, name)
    # A wheel is installed as files, so this is a real directory (never a zip member).
    return pathlib.Path(str(root))


def packaged_capsule() -> pathlib.Path | None:
    """The capsule this installation ships, or None (a source checkout)."""
    path = _packaged(CAPSULE)
    return path if (path / "manifest.json").is_file() else None


def packaged_ui() -> pathlib.Path | None:
    """The web console this installation ships, or None (a source checkout)."""
    path = _packaged(WEB)
    return path if (path / "index.html").is_file() else None


def default_capsule_dir() -> pathlib.Path:
    """`capsule_dir` when the config names none: the packaged capsule, else build/capsule."""
    return packaged_capsule() or DEV_CAPSULE_DIR


def default_ui_dir() -> pathlib.Path:
    """`ui_dir` when the config names none: the packaged web console, else the checkout's
    web/dist (built by `make web`); a path without index.html means no UI."""
    packaged = packaged_ui()
    if packaged is not None:
        return packaged
    root = checkout()
    return root / "web" / "dist" if root is not None else _packaged(WEB)
