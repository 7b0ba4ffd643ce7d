"""Reliability tests: `--run-soak` and the `soak` marker.

Soak tests (marked `soak`) run for minutes; `make test` must neither run them nor report them as
skipped. Without `--run-soak` they are *deselected* at collection (reported as deselected, not
skipped); `make soak` passes `--run-soak -m soak` and runs only them. The forgelet kill test
needs the session's private dockerd, imported here like tests/integration/forgelet does.
"""

from __future__ import annotations

import pytest

from tests.integration.backends.docker import dockerd, python_image

__all__ = ["dockerd", "python_image"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "soak: long soak test, run only by `make soak` (--run-soak)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-soak", default=False):
        return
    soak = [item for item in items if item.get_closest_marker("soak") is not None]
    if soak:
        config.hook.pytest_deselected(items=soak)
        items[:] = [item for item in items if item.get_closest_marker("soak") is None]
