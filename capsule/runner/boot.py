"""The runner's entry point (runner.pex's): the least it must import before the training command starts.

betterproto2 (the generated messages' runtime, needed to read capsule.json and journal the first
records) learns its own version with ``importlib.metadata.version("betterproto2")`` at import:
importlib.metadata with email, csv, zipfile and inspect behind it is about a quarter of the
runner's imports before the command starts, for one version string. Here that version is read
from the one ``betterproto2-<version>.dist-info`` directory next to the package (what
importlib.metadata would find in this isolated interpreter), and betterproto2's own
``_version`` module runs against a stand-in that answers only that question; its compiler check
is untouched. When that cannot be done (no such directory, two of them, betterproto2 already
imported), betterproto2 is imported as usual.

The generated modules import ``betterproto2.grpclib`` for their client stubs only, and that
package's ``__init__`` imports the server half too (grpclib.server, and behind it grpclib's
protocol, h2 and multidict). The runner serves nothing: the package is set up with its client
half alone, and grpclib's protocol is imported when the ingest sender is, after the command
started.

The generated ``google.protobuf`` module imports ``dateutil.parser`` (its tz and parser tables: a
sixth of those imports) for one call, Timestamp.from_dict of a string, which the runner never
makes: ``dateutil.parser`` is set up lazily (importlib's LazyLoader) and runs on first use only.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types

PACKAGE = "betterproto2"
METADATA = "importlib.metadata"
STUBS = "betterproto2.grpclib"
LAZY = ("dateutil.parser",)


def _dist_version(name: str) -> str | None:
    """The version of the one ``<name>-<version>.dist-info`` next to package `name`, or None."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    site = os.path.dirname(next(iter(spec.submodule_search_locations)))
    prefix, suffix = f"{name}-", ".dist-info"
    try:
        found = [e[len(prefix) : -len(suffix)] for e in os.listdir(site) if e.startswith(prefix) and e.endswith(suffix)]
    except OSError:
        return None
    return found[0] if len(found) == 1 else None


def preload_messages_runtime() -> None:
    """Import betterproto2 without importlib.metadata when its version is known without it."""
    if PACKAGE in sys.modules or METADATA in sys.modules:
        return
    version = _dist_version(PACKAGE)
    if version is None:
        return

    def known_version(name: str) -> str:
        if name != PACKAGE:
            raise LookupError(f"only {PACKAGE}'s version is known here, not {name}'s")
        return version

    stand_in = types.ModuleType(METADATA)
    stand_in.version = known_version  # type: ignore[attr-defined]
    importlib_pkg = sys.modules["importlib"]
    sys.modules[METADATA] = stand_in
    try:
        import betterproto2  # noqa: F401 - imported for the side effect: cached in sys.modules
    except Exception:
        # whatever it half imported goes; the messages import it again the usual way
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
            del sys.modules[name]
    finally:
        del sys.modules[METADATA]
        if getattr(importlib_pkg, "metadata", None) is stand_in:
            delattr(importlib_pkg, "metadata")


def preload_client_stubs() -> None:
    """``betterproto2.grpclib`` with ServiceStub (the client half) only; as usual when not possible."""
    if STUBS in sys.modules or PACKAGE not in sys.modules:
        return
    spec = importlib.util.find_spec(STUBS)
    if spec is None or spec.loader is None or not spec.submodule_search_locations:
        return
    package = importlib.util.module_from_spec(spec)  # its __init__ is not run
    sys.modules[STUBS] = package
    try:
        from betterproto2.grpclib.grpclib_client import ServiceStub
    except Exception:
        del sys.modules[STUBS]
        return
    package.ServiceStub = ServiceStub  # type: ignore[attr-defined]
    sys.modules[PACKAGE].grpclib = package  # type: ignore[attr-defined]


def import_lazily(name: str) -> None:
    """A stand-in for module `name` that imports the real one on its first attribute access.

    (importlib's LazyLoader does not do here: the import statement itself reads the module's
    ``__spec__``, which loads it.) Nothing is done when `name` is imported already or its parent
    package cannot be.
    """
    if name in sys.modules:
        return
    parent, _, child = name.rpartition(".")
    try:
        package = importlib.import_module(parent) if parent else None
    except ImportError:
        return
    stand_in = types.ModuleType(name)

    def load(attr: str) -> object:
        if sys.modules.get(name) is stand_in:
            del sys.modules[name]
        return getattr(importlib.import_module(name), attr)

    stand_in.__getattr__ = load  # type: ignore[method-assign]
    sys.modules[name] = stand_in
    if package is not None:
        setattr(package, child, stand_in)


def entry() -> None:
    """Run the runner (see main.py), its messages runtime imported the short way first."""
    for name in LAZY:
        import_lazily(name)
    preload_messages_runtime()
    preload_client_stubs()
    from .main import entry as run_runner

    run_runner()
