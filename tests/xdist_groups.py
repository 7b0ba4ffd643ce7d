"""Which pytest-xdist worker runs which tests, when `make test` runs the suite on several workers.

About half of one pytest process's wall time is spent waiting on the processes its tests start, so
`make test` runs `pytest -n 3 --dist loadgroup` (Makefile: TEST_WORKERS). The work units:

- **a backend's tests**, one unit per backend (dockerd, the Slurm cluster, the CRD server): one
  worker starts each backend, once. A test belongs to a backend by its marks (a parametrized kind
  carries its backend's mark) or by the session fixtures it requests. A second start would cost
  the start again and race the first one on its caches under build/ (the test image's root file
  system, the Slurm chroot, `make images`' dist/); the backend fixtures check it never happens
  (tests/integration/backends/workers.py).
- **every other test**, by its module, so that module fixtures run once.

pytest-xdist's own `loadgroup` reads `xdist_group` marks by rewriting each item's node id on the
worker, which pytest 9 ignores (a node id is computed from the collection tree). So the groups
travel another way: the controller names a file in STARFORGE_TEST_GROUPS before it starts the
workers; each worker writes the map {node id: backend} there after collecting (the workers collect
the same tests, so they write the same map); the controller's scheduler reads it when it cuts the
collection into units, which it does only once every worker has collected.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import tempfile
from typing import Any

import pytest

ENV = "STARFORGE_TEST_GROUPS"
# backend -> the session fixtures that start it; its mark has the backend's name
BACKENDS: dict[str, tuple[str, ...]] = {
    "docker": ("dockerd", "python_image"),
    "slurm": ("slurm_cluster",),
    "kube": ("kube",),
}
_DIR = pytest.StashKey[pathlib.Path]()


def backend_of(item: pytest.Item) -> str | None:
    """The backend `item` needs (see the module docstring); None when it needs none of them."""
    names = set(getattr(item, "fixturenames", ()))
    for backend, fixtures in BACKENDS.items():
        if item.get_closest_marker(backend) is not None or names.intersection(fixtures):
            return backend
    return None


def unit_of(nodeid: str, groups: dict[str, str]) -> str:
    """The work unit of `nodeid`: its backend's, else its module's."""
    backend = groups.get(nodeid)
    return f"backend:{backend}" if backend else nodeid.split("::", 1)[0]


def configure(config: pytest.Config) -> None:
    """On the controller of a `--dist loadgroup` run: the file the workers will write."""
    if os.environ.get("PYTEST_XDIST_WORKER") or not _load_group(config):
        return
    folder = pathlib.Path(tempfile.mkdtemp(prefix="starforge-test-groups-"))
    config.stash[_DIR] = folder
    os.environ[ENV] = str(folder / "groups.json")  # the workers, started after this, inherit it


def unconfigure(config: pytest.Config) -> None:
    folder = config.stash.get(_DIR, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop(ENV, None)


def publish(items: list[pytest.Item]) -> None:
    """On a worker: write the backend of every collected test that has one."""
    target = os.environ.get(ENV)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not target or not worker:
        return
    groups = {item.nodeid: backend for item in items if (backend := backend_of(item))}
    draft = pathlib.Path(f"{target}.{worker}")
    draft.write_text(json.dumps(groups))
    os.replace(draft, target)  # whole or not at all: the other worker may be writing the same map


def read_groups(path: str | None) -> dict[str, str]:
    """The map the workers wrote; empty when there is none (then every test goes by its module,
    and a backend reached from two workers fails in its fixture, saying so)."""
    if not path:
        return {}
    try:
        groups: dict[str, str] = json.loads(pathlib.Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return groups


def scheduler(config: pytest.Config, log: Any) -> Any:
    """The controller's scheduler for `--dist loadgroup`; None (xdist's own) for the other modes."""
    if not _load_group(config):
        return None
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    class BackendScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """xdist's scope scheduling, with `unit_of` as the scope of a test."""

        _groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:  # first called once every worker has collected
                self._groups = read_groups(os.environ.get(ENV))
            return unit_of(nodeid, self._groups)

    return BackendScheduling(config, log)


def _load_group(config: pytest.Config) -> bool:
    return bool(config.getoption("numprocesses", None)) and config.getoption("dist", "no") == "loadgroup"
