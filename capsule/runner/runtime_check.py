"""Before the method runs: is this interpreter and image what the job's runtime declares?

capsule.json carries the catalog runtime's declared Python version and capabilities
(`run.runtime_python`, `run.runtime_capabilities`). An image may declare its own capabilities
with STARFORGE_IMAGE_CAPABILITIES (comma-separated, e.g. `ENV STARFORGE_IMAGE_CAPABILITIES=cpu,vllm`
in its Dockerfile), which then replace the runtime's. A mismatch is a PrecheckError with a hint,
so the console shows a diagnosis instead of a framework's stack trace minutes later.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

from .capsule_file import RunSpec
from .errors import PrecheckError

IMAGE_CAPABILITIES = "STARFORGE_IMAGE_CAPABILITIES"
# verl's rollout engines, each a capability of the runtimes that ship it.
ROLLOUT_KEY = ("actor_rollout_ref", "rollout", "name")
ROLLOUT_ENGINES = ("vllm", "sglang")


def _version(text: str) -> tuple[int, ...] | None:
    try:
        return tuple(int(part) for part in text.strip().split("."))
    except ValueError:
        return None


def check_python(run: RunSpec, version: Sequence[int] = tuple(sys.version_info[:3])) -> None:
    """The interpreter (the image's, which also runs the method) is at least the declared one."""
    need = _version(run.runtime_python) if run.runtime_python else None
    if need is None:
        return
    if tuple(version[: len(need)]) < need:
        have = ".".join(str(v) for v in version)
        wanted = ".".join(str(v) for v in need)
        raise PrecheckError(
            f"this image runs Python {have}, but runtime {run.runtime_id or '?'} of {run.method} needs "
            f"Python {wanted} or newer",
            hint=f"Run {run.method} in its runtime's image or in an image with Python {wanted}+ (--image); "
            f"`sf recipe show {run.method}` lists the runtimes, their images and Python versions.",
        )


def declared_capabilities(run: RunSpec, environ: Mapping[str, str]) -> tuple[set[str], str]:
    """(capabilities, who declared them): the image's STARFORGE_IMAGE_CAPABILITIES, else the runtime's."""
    image = environ.get(IMAGE_CAPABILITIES)
    if image is not None:
        return {c.strip() for c in image.split(",") if c.strip()}, f"the image ({IMAGE_CAPABILITIES})"
    return set(run.runtime_capabilities), f"runtime {run.runtime_id or '?'}"


def _nested(config: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = config
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def needed_capabilities(run: RunSpec) -> dict[str, str]:
    """capability -> why this run needs it."""
    needs: dict[str, str] = {}
    pools = run.pools
    if pools and all(int(p.get("gpus_per_node", 0) or 0) == 0 for p in pools):
        needs["cpu"] = "it runs on CPU-only machines (a cpu profile)"
    if len(pools) > 1:
        needs["multi_pool"] = f"it runs on {len(pools)} pools"
    engine = _nested(run.config, ROLLOUT_KEY)
    if engine in ROLLOUT_ENGINES:
        needs[str(engine)] = f"{'.'.join(ROLLOUT_KEY)} is {engine}"
    return needs


def check_capabilities(run: RunSpec, environ: Mapping[str, str]) -> None:
    """Every capability the run needs is declared; nothing is checked when none are declared."""
    declared, who = declared_capabilities(run, environ)
    if not declared and IMAGE_CAPABILITIES not in environ:
        return
    missing = {cap: why for cap, why in needed_capabilities(run).items() if cap not in declared}
    if missing:
        reasons = "; ".join(f"{cap} ({why})" for cap, why in sorted(missing.items()))
        raise PrecheckError(
            f"{run.method} needs capabilities that {who} does not declare: {reasons}; "
            f"declared: {', '.join(sorted(declared)) or 'none'}",
            hint="Pick a profile or config this runtime supports, or a runtime/image that declares the "
            f"capability (`sf recipe show {run.method}` lists each runtime's capabilities).",
        )


def check_runtime(run: RunSpec, environ: Mapping[str, str]) -> None:
    check_python(run)
    check_capabilities(run, environ)
