"""``python -m sfrunner`` (or ``python -m capsule.runner`` from the repo) runs the runner."""

from .boot import entry

entry()
