"""Pipeline stages of the catalog methods (`sf submit exp --then export --then eval`).

A stage job shares its training job's FORGE_OUT_DIR. Its capsule.json carries ``run.stage`` and,
as ``run.entrypoint``, the stage's command from the recipe (``stage_commands``): one line split
like a shell would, with placeholders this module fills in word by word (no shell runs it):

    {checkpoint}       the training job's latest checkpoint (found by the framework's rule)
    {export_dir}       FORGE_OUT_DIR/export, where export writes the Hugging Face model
    {model}            --model, absolute when it is a lab path ("" when not given)
    {validation_data}  --validation-data, absolute
    {stage_script}     the runner's built-in export/eval script (hf_stage.py), copied to scratch
    {out_dir}          FORGE_OUT_DIR
"""

from __future__ import annotations

import importlib.resources
import pathlib
import re
import shlex
import string
from collections.abc import Callable

from ..errors import PrecheckError
from . import inputs
from .base import AdapterContext, CommandSpec
from .logparse import HfTrainerLogParser

EXPORT_DIR = "export"
STAGE_SCRIPT = "hf_stage.py"
# Finds the latest checkpoint under FORGE_OUT_DIR/checkpoints: (its directory, its step) or None.
CheckpointFinder = Callable[[pathlib.Path], "tuple[pathlib.Path, int] | None"]


def latest_numbered(
    checkpoints: pathlib.Path, pattern: re.Pattern[str], complete_marker: str = ""
) -> tuple[pathlib.Path, int] | None:
    """The child directory of ``checkpoints`` whose name matches ``pattern`` with the highest number.

    With ``complete_marker``, only directories holding that file count: a checkpoint being written
    when the attempt was stopped (a pause, a node lost) has no marker yet and cannot be resumed."""
    best: tuple[pathlib.Path, int] | None = None
    if checkpoints.is_dir():
        for child in checkpoints.iterdir():
            m = pattern.match(child.name)
            if not m or not child.is_dir() or (complete_marker and not (child / complete_marker).is_file()):
                continue
            if best is None or int(m.group(1)) > best[1]:
                best = (child, int(m.group(1)))
    return best


def is_stage(ctx: AdapterContext) -> bool:
    return ctx.run.stage not in ("", "train")


def _stage_script(ctx: AdapterContext) -> str:
    """hf_stage.py's source, written to scratch: the runner may be a zipped pex."""
    source = importlib.resources.files(__package__).joinpath(STAGE_SCRIPT).read_text(encoding="utf-8")
    target = ctx.scratch_dir / STAGE_SCRIPT
    target.write_text(source, encoding="utf-8")
    return str(target)


def _names(template: str) -> set[str]:
    return {name for word in shlex.split(template) for _, name, _, _ in string.Formatter().parse(word) if name}


def command(ctx: AdapterContext, find_checkpoint: CheckpointFinder, cwd: pathlib.Path) -> CommandSpec:
    """The stage's command from ``run.entrypoint``; PrecheckError when an input it names is missing."""
    template = ctx.run.entrypoint
    try:
        names = _names(template)
    except ValueError as exc:
        raise PrecheckError(f"the {ctx.run.stage} stage's command {template!r} does not parse: {exc}") from None
    out = inputs.out_dir(ctx)
    values = {"out_dir": str(out), "export_dir": str(out / EXPORT_DIR)}
    # Metrics of a stage are reported at the step of the checkpoint it comes from.
    found = find_checkpoint(out / "checkpoints")
    step = found[1] if found is not None else 0
    if "checkpoint" in names:
        if found is None:
            raise PrecheckError(
                f"the {ctx.run.stage} stage of {ctx.run.method} needs a checkpoint in FORGE_OUT_DIR/checkpoints "
                "and the training job left none (did it save one? see its save settings)"
            )
        values["checkpoint"] = str(found[0])
    if "validation_data" in names:
        values["validation_data"] = inputs.validation_data(ctx)
        if not values["validation_data"]:
            raise PrecheckError(
                f"the {ctx.run.stage} stage of {ctx.run.method} evaluates on the validation data: "
                "submit with --validation-data <lab-path>"
            )
    if "model" in names:
        values["model"] = inputs.model(ctx, required=False)
    if "stage_script" in names:
        values["stage_script"] = _stage_script(ctx)
    if "export_dir" in names and ctx.run.stage != "export" and not (out / EXPORT_DIR).is_dir():
        raise PrecheckError(
            f"the {ctx.run.stage} stage of {ctx.run.method} reads FORGE_OUT_DIR/{EXPORT_DIR}, which the export "
            "stage writes: submit with --then export before it"
        )
    argv = [word.format(**values) for word in shlex.split(template)]
    script = argv[1] if len(argv) > 1 and argv[0].startswith("python") and argv[1].endswith(".py") else ""
    if script and not (cwd / script).is_file():
        raise PrecheckError(f"the {ctx.run.stage} stage runs {script}, which is not in {cwd}")
    return CommandSpec(
        argv=argv,
        cwd=cwd,
        name=f"{ctx.run.stage} stage",
        display=f"the {ctx.run.stage} stage of {ctx.run.method} ({pathlib.Path(argv[0]).name} ...)",
        # hf_stage.py's eval prints its metrics as one HF-Trainer-style dict line, at the trained step.
        metrics=HfTrainerLogParser(1, step),
    )
