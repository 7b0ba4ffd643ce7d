"""forgelet: the node agent on each GPU machine of an `agent` fleet.

It registers the node (its GPUs and where they were found) with the control plane's
NodeRegistryService, heartbeats its running attempts, and serves ForgeletService to the agent
executor, running each attempt with the local executor (docker runtime on GPU nodes, process
runtime on CPU nodes). Attempts are found again by their records and container labels, so a
forgelet restart never stops a running job. See docs/forgelet.md.
"""

from common import __version__ as VERSION

__all__ = ["VERSION"]
