"""Session-wide test set-up shared by unit and integration tests.

Backends (dockerd, the Kubernetes CRD server, the Slurm cluster, PostgreSQL) are started by
session fixtures in tests/integration/backends/, stopped by PID when the session ends. A backend
that cannot start fails its tests loudly; nothing is skipped silently.
"""

from __future__ import annotations

import os
import pathlib
import sys
from collections.abc import Iterator

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Tools installed in the venv (buf, ruff, envoy, sf) must be found even when pytest is run directly.
_venv_bin = str(pathlib.Path(sys.executable).parent)
if _venv_bin not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = _venv_bin + os.pathsep + os.environ.get("PATH", "")


def pytest_addoption(parser: pytest.Parser) -> None:
    # Here (the top-level conftest), not in tests/reliability/conftest.py: pytest takes options only
    # from conftests it loads at start-up, and `pytest` (testpaths) does not load that one early.
    parser.addoption(
        "--run-soak",
        action="store_true",
        default=False,
        help="also run the long soak tests of tests/reliability (marked soak); `make soak` sets it",
    )


@pytest.fixture(params=["sqlite", "postgres"])
def ledger(request: pytest.FixtureRequest) -> Iterator[str]:
    """Runs the test twice: its consoles keep their ledger on SQLite, then on PostgreSQL.

    Console-level modules (integration and browser) use it with
    `pytestmark = pytest.mark.usefixtures("ledger")`."""
    from tests.integration.console import ledger_backend

    with ledger_backend(request.param):
        yield request.param


# `make test` runs the suite on pytest-xdist workers (`-n 2 --dist loadgroup`). A test of one of
# these backends runs on the worker that already started it: the backends are session fixtures
# that a second worker would start again (a second dockerd importing the test image, a second
# Slurm cluster), and their first start fills caches under build/ that two starts would race on.
# Every other module goes to whichever worker is free (loadgroup schedules those by module).
BACKEND_GROUPS = {"docker": ("dockerd", "python_image"), "slurm": ("slurm_cluster",), "kube": ("kube",)}


def backend_group(item: pytest.Item) -> str | None:
    """The backend `item` needs, by its marks (a parametrized kind carries its backend's mark) or
    by the session fixtures it requests; None for a test that needs none of them."""
    names = set(getattr(item, "fixturenames", ()))
    for group, fixtures in BACKEND_GROUPS.items():
        if item.get_closest_marker(group) is not None or names.intersection(fixtures):
            return group
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups into node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        group = backend_group(item)
        if group is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))
