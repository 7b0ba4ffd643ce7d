"""One worker per backend: the check behind `make test`'s pytest-xdist groups.

`make test` runs the suite on pytest-xdist workers, and tests/xdist_groups.py makes the tests of
dockerd, the Slurm cluster and the CRD server one work unit each, so that one worker starts each
of these backends once. A test that reaches a backend without being in its group (a fixture taken
with `request.getfixturevalue`, say) would make a second worker start the backend again: twice the
start-up, and two starts racing on the caches under build/ (the test image's root file system,
the Slurm chroot). `claim_backend` turns that into a failure that names the backend, instead of a
slower or flaky run.
"""

from __future__ import annotations

import contextlib
import os
import pathlib

import pytest


def claim_backend(name: str, basetemp: pathlib.Path) -> None:
    """Record that this worker starts backend `name`; fail if another worker of this run already did.

    `basetemp`: this worker's `tmp_path_factory.getbasetemp()`. Outside pytest-xdist (one process)
    there is nothing to check. The claim is a file in the run's base directory, which the workers'
    own base directories are under; it is published with
    `link`, which never replaces a file, so two workers cannot both win."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return
    run_dir = basetemp.parent
    claim = run_dir / f"backend-{name}"
    draft = run_dir / f".backend-{name}.{worker}"
    draft.write_text(worker)
    try:
        os.link(draft, claim)
    except FileExistsError:
        owner = claim.read_text()
        if owner != worker:
            pytest.fail(
                f"the {name} backend was already started by pytest-xdist worker {owner}, and this worker "
                f"({worker}) was about to start another: run with `--dist loadgroup`, as `make test` "
                f"does, or a test that uses it is not in the {name} backend's work unit "
                "(tests/xdist_groups.py: BACKENDS and the test's marks)",
                pytrace=False,
            )
    finally:
        with contextlib.suppress(FileNotFoundError):
            draft.unlink()
