"""The one error the Slurm test-cluster tooling raises."""

from __future__ import annotations


class ClusterError(RuntimeError):
    """The test cluster could not be built, started or stopped.

    The message always names the log files to read (and quotes their last lines), because the
    person who sees it is usually looking at a failed CI run, not at this machine.
    """
