"""Ask a starting cluster whether it is ready: JWT tokens from `scontrol`, node states over REST.

Both run against the live daemons: `scontrol token` inside the cluster's namespaces (it needs the
chroot's /etc/slurm and /proc, which exist only there), node states through slurmrestd (which also
proves slurmrestd answers and accepts the token). Stdlib only, like the rest of tools/slurm.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import urllib.error
import urllib.request
from typing import Any

# The readiness probe's REST version; the cluster itself serves v0.0.40-v0.0.42.
PROBE_API = "v0.0.42"
CLEAN_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "HOME": "/root"}


class NotReady(Exception):
    """The cluster does not answer as expected yet; the message says what was seen."""


def in_cluster(nsinit_pid: int, chroot: pathlib.Path, argv: list[str], timeout: float = 15.0) -> str:
    """Run `argv` inside the cluster's mount + PID namespaces and chroot; return its stdout."""
    command = ["nsenter", f"--target={nsinit_pid}", "--mount", "--pid", "--", "chroot", str(chroot), *argv]
    try:
        result = subprocess.run(command, env=CLEAN_ENV, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise NotReady(f"`{' '.join(argv)}` did not finish within {timeout:.0f} s") from exc
    if result.returncode != 0:
        raise NotReady(f"`{' '.join(argv)}` exited {result.returncode}: {result.stderr.strip()}")
    return result.stdout


def mint_token(nsinit_pid: int, chroot: pathlib.Path, user: str, lifespan_s: int) -> str:
    """A JWT for `user` from `scontrol token` (SlurmUser=root may mint one for anybody)."""
    out = in_cluster(nsinit_pid, chroot, ["scontrol", "token", f"username={user}", f"lifespan={lifespan_s}"])
    for line in out.splitlines():
        if line.startswith("SLURM_JWT="):
            return line.removeprefix("SLURM_JWT=").strip()
    raise NotReady(f"`scontrol token` printed no SLURM_JWT= line: {out.strip()!r}")


def rest_get(url: str, user: str, token: str, timeout: float = 5.0) -> dict[str, Any]:
    """GET a slurmrestd endpoint with JWT headers; NotReady on any failure."""
    if not url.startswith("http://127.0.0.1:"):
        raise ValueError(f"the test cluster's slurmrestd listens on 127.0.0.1 only, not {url}")
    request = urllib.request.Request(  # noqa: S310 - checked above: http://127.0.0.1 only
        url, headers={"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": token, "Accept": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - http://127.0.0.1 only
            body: dict[str, Any] = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise NotReady(f"GET {url}: HTTP {exc.code}: {exc.read()[:300]!r}") from exc
    except (OSError, ValueError) as exc:
        raise NotReady(f"GET {url}: {exc}") from exc
    if body.get("errors"):
        raise NotReady(f"GET {url}: {body['errors']}")
    return body


def nodes_idle(restd_url: str, user: str, token: str, names: tuple[str, ...]) -> dict[str, list[str]]:
    """Node states by name; NotReady unless every node in `names` is exactly IDLE."""
    body = rest_get(f"{restd_url}/slurm/{PROBE_API}/nodes/", user, token)
    states = {node["name"]: list(node.get("state", [])) for node in body.get("nodes", [])}
    if any(states.get(name) != ["IDLE"] for name in names):
        raise NotReady(f"node states: {states}")
    return states
