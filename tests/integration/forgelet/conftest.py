"""Fixtures for forgelet/agent tests: the private dockerd and the test image (session fixtures)."""

from tests.integration.backends.docker import dockerd, python_image

__all__ = ["dockerd", "python_image"]
