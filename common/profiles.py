"""Profiles: `--profile h200`, `h200:4`, `h200:16`, `train=h200:8` resolved against the hardware registry.

Shared by `sf` (checks a profile before packing, with the registry the console publishes) and the
control plane's admission (checks it again: the server never trusts the client)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

from starforge_api.control.v1 import error_reason_pb2
from starforge_api.job.v1 import job_spec_pb2

from common import errors


class ProfileConfig(Protocol):
    """One GPU series of the registry (control.config.ProfileConfig, or built from ListProfiles)."""

    @property
    def series(self) -> str: ...
    @property
    def gpus_per_node(self) -> int: ...
    @property
    def default_gpus(self) -> int: ...
    @property
    def max_nodes(self) -> int: ...


PROFILE_RE = re.compile(r"^(?P<series>[a-z0-9][a-z0-9-]*)(?::(?P<gpus>\d+))?$")
POOL_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,31}$")


def valid_shapes(p: ProfileConfig) -> str:
    if p.gpus_per_node == 0:
        return f"{p.series} (CPU only)"
    small = [str(n) for n in (1, 2, 4) if n < p.gpus_per_node]
    big = [str(p.gpus_per_node * k) for k in (1, 2, 4) if k <= p.max_nodes]
    shapes = ",".join(small + big)
    return f"{p.series}:{{{shapes}}} (up to {p.gpus_per_node} per node, multiples of {p.gpus_per_node} beyond)"


def _bad(field: str, message: str) -> errors.InvalidArgument:
    return errors.InvalidArgument(
        message,
        reason=error_reason_pb2.ERROR_REASON_BAD_PROFILE,
        field_violations=(errors.FieldViolation(field, message),),
    )


def resolve_one(name: str, text: str, registry: Sequence[ProfileConfig]) -> job_spec_pb2.Pool:
    m = PROFILE_RE.match(text.strip().lower())
    by_series = {p.series: p for p in registry}
    if m is None:
        raise _bad("pools", f"profile {text!r} is not valid: use <series> or <series>:<gpus>, e.g. h200:8")
    series, gpus_text = m.group("series"), m.group("gpus")
    prof = by_series.get(series)
    if prof is None:
        raise _bad(
            "pools",
            f"unknown GPU series {series!r} in profile {text!r}; known series: {', '.join(sorted(by_series))}",
        )
    if prof.gpus_per_node == 0:
        if gpus_text not in (None, "0"):
            raise _bad("pools", f"profile {text!r}: {series} has no GPUs; use --profile {series}")
        return job_spec_pb2.Pool(name=name, series=series, nodes=1, gpus_per_node=0, profile=text)
    gpus = int(gpus_text) if gpus_text is not None else (prof.default_gpus or prof.gpus_per_node)
    if gpus <= 0:
        raise _bad("pools", f"profile {text!r}: ask for at least 1 GPU; valid: {valid_shapes(prof)}")
    if gpus <= prof.gpus_per_node:
        nodes, per_node = 1, gpus
    elif gpus % prof.gpus_per_node == 0:
        nodes, per_node = gpus // prof.gpus_per_node, prof.gpus_per_node
    else:
        raise _bad(
            "pools",
            f"profile {text!r}: {gpus} GPUs do not fill whole {series} nodes ({prof.gpus_per_node} per node); "
            f"valid: {valid_shapes(prof)}",
        )
    if nodes > prof.max_nodes:
        raise _bad("pools", f"profile {text!r}: {nodes} nodes exceed the {series} limit of {prof.max_nodes}")
    return job_spec_pb2.Pool(name=name, series=series, nodes=nodes, gpus_per_node=per_node, profile=text)


def resolve(
    requests: Sequence[job_spec_pb2.PoolRequest], registry: Sequence[ProfileConfig], default_profile: str
) -> list[job_spec_pb2.Pool]:
    if not requests:
        requests = [job_spec_pb2.PoolRequest(profile=default_profile or "cpu")]
    pools = []
    names: set[str] = set()
    for r in requests:
        name = r.name or ("main" if len(requests) == 1 else "")
        if not name:
            raise _bad("pools", "with several --profile options, name each pool: --profile train=h200:8")
        if not POOL_NAME_RE.match(name):
            raise _bad("pools", f"pool name {name!r} is not valid: use a-z, 0-9 and '-'")
        if name in names:
            raise _bad("pools", f"pool {name!r} is given twice")
        names.add(name)
        pools.append(resolve_one(name, r.profile, registry))
    return pools
