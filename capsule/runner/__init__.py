"""The capsule runner (packaged into runner-<sha16>.pex as the top-level package ``sfrunner``).

It runs on the training image's own Python (3.10-3.13) with pure-Python dependencies only, so all
imports inside this package are relative: the same sources work as ``capsule.runner`` in the repo
and as ``sfrunner`` in the pex.
"""
