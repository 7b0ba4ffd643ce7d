"""custom/custom: run the experiment's own train.sh with bash, from the workspace root."""

from __future__ import annotations

import shutil

from ..errors import PrecheckError
from ..paths import safe_relative
from .base import AdapterContext, CommandSpec


class CustomAdapter:
    name = "custom"

    def command(self, ctx: AdapterContext) -> CommandSpec:
        entrypoint = ctx.run.entrypoint
        if not entrypoint:
            raise PrecheckError("capsule.json run.entrypoint is empty; custom/custom needs a train.sh")
        relative = safe_relative(entrypoint)
        if relative is None:
            raise PrecheckError(f"run.entrypoint {entrypoint!r} must be a relative path inside the workspace")
        script = ctx.workspace_dir / relative
        if not script.is_file():
            raise PrecheckError(f"{entrypoint} not found in the workspace")
        bash = shutil.which("bash")
        if bash is None:
            raise PrecheckError(f"bash is not installed in the image; custom/custom runs {entrypoint} with bash")
        return CommandSpec(
            argv=[bash, str(script)],
            cwd=ctx.workspace_dir,
            name=script.name,
            display=entrypoint,
        )
