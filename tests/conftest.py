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


# `make test` runs the suite on pytest-xdist workers (`-n 3 --dist loadgroup`); tests/xdist_groups.py
# keeps each backend's tests on one worker and every other module whole.


def pytest_configure(config: pytest.Config) -> None:
    from tests import xdist_groups

    xdist_groups.configure(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    from tests import xdist_groups

    xdist_groups.unconfigure(config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from tests import xdist_groups

    xdist_groups.publish(items)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, absent when it is not installed
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    from tests import xdist_groups

    return xdist_groups.scheduler(config, log)
