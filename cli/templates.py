"""The files `sf init` and `sf new` write. Comments in them are the first documentation a
researcher reads, so they say what each key does and how to change it for one run."""

from __future__ import annotations

import json
from typing import Any

import yaml
from google.protobuf import json_format
from starforge_api.catalog.v1 import recipe_pb2
from starforge_api.job.v1 import job_spec_pb2

LAB_YAML = """\
# StarForge lab. `sf` finds this file by walking up from the current folder, like git.
project: "{project}"

# sf submit packs the files git tracks. List extra files (e.g. git-ignored data) under
# include and tracked files to leave out under exclude. Patterns without "/" match a name at
# any depth ("*.ckpt"); patterns with "/" start at the lab root ("data/*.jsonl"); "**" spans
# folders. Sensitive files (.env, *.pem, id_rsa*, ...) are always refused: exclude them here.
package:
  include: []
  exclude: []
"""

GITIGNORE_ENTRY = ".starforge/"

CUSTOM_CONFIG = """\
# Experiment "{exp}": method custom/custom (recipe {version}).
# custom/custom runs experiments/{exp}/train.sh from the root of your packed lab.

# image: the OCI image train.sh runs in. custom/custom needs one: set it here or pass
# `sf submit {exp} --image IMG` (which wins). Leave it empty to use the console's default
# image, if it has one. The console only runs images from registries it allows.
image: ""

# observability: how metrics reach you.
#   platform - StarForge collects them: in Python, `import starforge; starforge.report(step=..., loss=...)`
#              and watch them with `sf job metrics <job-id>`.
#   external - you report to your own tracker (W&B, MLflow); pass its URL with
#              `sf submit {exp} --observability-url URL`.
observability: platform

# Anything else you put here is your own configuration: the job receives this file as JSON,
# and `sf submit {exp} -s key=value` overrides a key for one run.
"""

TRAIN_SH = """\
#!/usr/bin/env bash
# Training command of experiment "{exp}" (method custom/custom).
#
# StarForge runs this script inside the image from config.yaml (or --image), with the packed
# lab as the working directory. Useful environment variables:
#   FORGE_OUT_DIR      persistent per job: write checkpoints and artifacts here. It survives
#                      retries, pause/resume and preemption; FORGE_RESUME=1 means it already holds
#                      an earlier attempt's checkpoints, so continue from the latest one.
#   FORGE_SCRATCH_DIR  per attempt scratch space, deleted when the attempt ends.
#   FORGE_JOB_ID, FORGE_ATTEMPT_NUMBER  identify the run.
#
# Metrics (observability: platform in config.yaml): from Python,
#     import starforge
#     starforge.report(step=step, loss=loss)
# and follow them with `sf job metrics $FORGE_JOB_ID`. stdout/stderr show up in `sf job logs`.
# A non-zero exit code fails the job; `sf job status` shows it with the last log lines.
set -euo pipefail

out_dir="${{FORGE_OUT_DIR:-./out}}"
mkdir -p "$out_dir"
echo "experiment {exp}: writing to $out_dir"

python3 - "$out_dir" <<'PY'
import pathlib
import sys

try:
    import starforge  # provided by the platform when observability is platform
except ImportError:
    starforge = None

out_dir = pathlib.Path(sys.argv[1])
for step in range(1, 11):
    loss = 1.0 / step  # replace with your training loop
    if starforge is not None:
        starforge.report(step=step, loss=loss)
    print(f"step {{step}} loss {{loss:.4f}}", flush=True)
(out_dir / "done.txt").write_text("trained\\n")
PY
"""


def lab_yaml(project: str) -> str:
    return LAB_YAML.format(project=project)


def lock_json(lock: job_spec_pb2.RecipeLock) -> str:
    """recipe.lock.json content: stable key order so diffs stay small."""
    data = json_format.MessageToDict(lock, preserving_proto_field_name=True)
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def custom_config(exp: str, lock: job_spec_pb2.RecipeLock) -> str:
    return CUSTOM_CONFIG.format(exp=exp, version=lock.version)


def train_sh(exp: str) -> str:
    return TRAIN_SH.format(exp=exp)


def _scalar(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=1000).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def _param_comment(p: recipe_pb2.Parameter) -> str:
    kind = recipe_pb2.ParameterType.Name(p.type).removeprefix("PARAMETER_TYPE_").lower()
    bits = [kind]
    if p.HasField("min") or p.HasField("max"):
        lo = f"{p.min:g}" if p.HasField("min") else ""
        hi = f"{p.max:g}" if p.HasField("max") else ""
        bits.append(f"{lo}..{hi}")
    if p.choices:
        bits.append("one of " + ", ".join(p.choices))
    if p.required:
        bits.append("required")
    doc = f"{p.doc} " if p.doc else ""
    return f"{doc}({'; '.join(bits)})"


def recipe_config(exp: str, recipe: recipe_pb2.Recipe, lock: job_spec_pb2.RecipeLock) -> str:
    """config.yaml for a catalog method: every parameter with its default and documentation."""
    lines = [
        f'# Experiment "{exp}": method {recipe.name} {recipe.version} '
        f"(framework {lock.framework_version or 'default'}).",
        f"# `sf recipe show {recipe.name}` documents every parameter; `sf submit {exp} -s key=value`",
        "# overrides one for a single run.",
        "",
        "# image: leave unset to run the image of the recipe's runtime; set it (or --image) to use your own.",
        "# observability: platform (metrics in `sf job metrics`) or external (--observability-url URL).",
        f"observability: {recipe.default_observability or 'platform'}",
        "",
    ]
    tree: dict[str, Any] = {}
    flat: list[recipe_pb2.Parameter] = []
    for p in recipe.parameters:
        node = tree
        parts = p.key.split(".")
        ok = True
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                ok = False
                break
            node = child
        if not ok or parts[-1] in node:
            flat.append(p)
            continue
        node[parts[-1]] = p
    _emit(tree, 0, lines)
    for p in flat:  # a key that is also a prefix of others cannot be written as nested YAML
        lines.append(f"# {p.key}: {_default(p)}  - {_param_comment(p)}; set it with -s {p.key}=VALUE")
    return "\n".join(lines).rstrip() + "\n"


def _default(p: recipe_pb2.Parameter) -> str:
    if not p.default_json:
        return "null  # required: set a value"
    try:
        return _scalar(json.loads(p.default_json))
    except ValueError:
        return _scalar(p.default_json)


def _emit(tree: dict[str, Any], depth: int, lines: list[str]) -> None:
    pad = "  " * depth
    for key, value in tree.items():
        if isinstance(value, dict):
            lines.append(f"{pad}{key}:")
            _emit(value, depth + 1, lines)
        else:
            lines.append(f"{pad}# {_param_comment(value)}")
            lines.append(f"{pad}{key}: {_default(value)}")
