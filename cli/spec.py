"""Building the JobSpec (`forge/v2`) that `sf submit` sends, and parsing what users type for it.

Everything here is pure (no network, no git): the submit command gathers the lab, the experiment
files, the packed workspace and the command-line options, and `build_spec` assembles them. The
console validates every field again; the checks here exist to fail fast, before packing and
uploading, with a message that points at the flag.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from starforge_api.job.v1 import job_spec_pb2

import cli
from cli.errors import usage
from cli.lab import CUSTOM_METHOD, Experiment, Lab
from cli.pack import Pack

API_VERSION = "forge/v2"
RESERVED_CONFIG_KEYS = ("image", "observability")  # platform settings kept in config.yaml

_KEY_SEGMENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]*$")
_POOL_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
_SERIES = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
_SECRET_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_DATASET_REF = re.compile(r"^[a-z][a-z0-9-]{1,31}/[a-z0-9][a-z0-9._-]*(@[A-Za-z0-9._-]+)?$")
_OBSERVABILITY = {
    "platform": job_spec_pb2.OBSERVABILITY_MODE_PLATFORM,
    "external": job_spec_pb2.OBSERVABILITY_MODE_EXTERNAL,
}


def parse_override(text: str) -> job_spec_pb2.Override:
    """`-s key=value`: a non-empty dotted key (`grpo.kl_coef`) and the value as typed."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep:
        raise usage(f"-s {text!r}: expected key=value, e.g. -s grpo.kl_coef=0.05")
    if not key:
        raise usage(f"-s {text!r}: the key before '=' is empty")
    for segment in key.split("."):
        if not _KEY_SEGMENT.match(segment):
            raise usage(
                f"-s {text!r}: invalid key `{key}`: use dotted names of letters, digits, '_' and '-' "
                "(e.g. policy.optimizer.lr)"
            )
    return job_spec_pb2.Override(key=key, value=value)


def parse_overrides(texts: Sequence[str], *, validate: bool = True) -> list[job_spec_pb2.Override]:
    """All `-s` values in command-line order (without validation: split at the first '=' only)."""
    if validate:
        return [parse_override(t) for t in texts]
    out = []
    for t in texts:
        key, _, value = t.partition("=")
        out.append(job_spec_pb2.Override(key=key, value=value))
    return out


def parse_profile(text: str) -> job_spec_pb2.PoolRequest:
    """`--profile [NAME=]SERIES[:GPUS]`: "h200:8", "cpu", "train=h200:8"."""
    name, sep, profile = text.partition("=")
    if not sep:
        name, profile = "", text
    name, profile = name.strip(), profile.strip()
    example = "e.g. --profile h200:8 or --profile train=h200:8"
    if sep and not _POOL_NAME.match(name):
        raise usage(f"--profile {text!r}: invalid pool name `{name}` ({example})")
    series, colon, gpus = profile.partition(":")
    if not _SERIES.match(series):
        raise usage(f"--profile {text!r}: expected SERIES or SERIES:GPUS ({example})")
    if colon and (not gpus.isdigit() or int(gpus) < 1):
        raise usage(f"--profile {text!r}: the GPU count after ':' must be a positive integer ({example})")
    return job_spec_pb2.PoolRequest(name=name, profile=profile)


def parse_profiles(texts: Sequence[str], *, validate: bool = True) -> list[job_spec_pb2.PoolRequest]:
    """All `--profile` values; several pools must each be named, and names must differ."""
    if not validate:
        out = []
        for t in texts:
            name, sep, profile = t.partition("=")
            out.append(job_spec_pb2.PoolRequest(name=name if sep else "", profile=profile if sep else t))
        return out
    pools = [parse_profile(t) for t in texts]
    if len(pools) > 1:
        unnamed = [p.profile for p in pools if not p.name]
        if unnamed:
            raise usage(
                "several --profile values need a pool name each, e.g. --profile train=h200:8 --profile rollout=h200:8",
            )
        names = [p.name for p in pools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise usage(f"--profile: pool name(s) given twice: {', '.join(dupes)}")
    return pools


def parse_dataset_ref(text: str, flag: str) -> str:
    """`owner/name[@version]`."""
    if not _DATASET_REF.match(text):
        raise usage(f"{flag} {text!r}: expected OWNER/NAME or OWNER/NAME@VERSION, e.g. alice/chat@v2")
    return text


def parse_secret_ref(text: str, where: str = "--secret") -> job_spec_pb2.SecretRef:
    """`NAME` or `NAME=ENV_VAR`: the secret NAME as environment variable ENV_VAR (default NAME)."""
    name, _, env = text.partition("=")
    name, env = name.strip(), env.strip()
    if not _SECRET_NAME.match(name) or (env and not _SECRET_NAME.match(env)):
        raise usage(
            f"{where} {text!r}: expected NAME or NAME=ENV_VAR (letters, digits and '_'), e.g. --secret HF=HF_TOKEN"
        )
    return job_spec_pb2.SecretRef(name=name, env=env if env != name else "")


def _config_secret(item: Any) -> job_spec_pb2.SecretRef:
    """One entry of config.yaml `secrets:`: "NAME", "NAME=ENV" or {name: NAME, env: ENV}."""
    if isinstance(item, str):
        return parse_secret_ref(item, "config.yaml secrets:")
    if isinstance(item, dict) and isinstance(item.get("name"), str) and set(item) <= {"name", "env"}:
        env = item.get("env") or ""
        return parse_secret_ref(f"{item['name']}={env}" if env else item["name"], "config.yaml secrets:")
    raise usage(f"config.yaml secrets: {item!r}: expected NAME, or {{name: NAME, env: ENV_VAR}}")


def secret_refs(config: dict[str, Any], flags: Sequence[str]) -> list[job_spec_pb2.SecretRef]:
    """config.yaml `secrets:` then `--secret` flags; a flag naming the same secret replaces its entry."""
    listed = config.get("secrets") or []
    if not isinstance(listed, list):
        raise usage("config.yaml secrets: expected a list, e.g. secrets: [WANDB_API_KEY, {name: HF, env: HF_TOKEN}]")
    refs = {ref.name: ref for ref in map(_config_secret, listed)}
    for text in flags:
        ref = parse_secret_ref(text)
        refs[ref.name] = ref
    return list(refs.values())


def config_to_json(data: dict[str, Any], where: str) -> str:
    """config.yaml data as a JSON object; YAML-only values (dates, .nan) are refused."""

    def default(obj: Any) -> Any:
        if hasattr(obj, "isoformat"):
            return obj.isoformat()
        raise TypeError(type(obj).__name__)

    try:
        return json.dumps(data, default=default, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise usage(f"{where}: cannot be expressed as JSON ({exc}); quote the value") from None


@dataclass
class SubmitOptions:
    """Everything `sf submit` takes from the command line, already split into lists."""

    experiment: str
    profiles: list[str] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)
    model: str = ""
    train_data: str = ""
    validation_data: str = ""
    train_dataset: str = ""
    image: str = ""
    framework_version: str = ""
    observability_url: str = ""
    observability_tool: str = ""
    then: list[str] = field(default_factory=list)
    retries: int | None = None
    priority: int = 0
    queue: str = ""
    fleet: str = ""
    allow_dirty: bool = False
    validate: bool = True
    dry_run: bool = False
    upgrade_recipe: bool = False
    follow: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    secrets: list[str] = field(default_factory=list)


@dataclass
class ExperimentFiles:
    """What submit read from experiments/<exp>/."""

    experiment: Experiment
    config: dict[str, Any]
    config_text: str
    lock: job_spec_pb2.RecipeLock


def check_options(opts: SubmitOptions) -> tuple[list[job_spec_pb2.PoolRequest], list[job_spec_pb2.Override]]:
    """Parse and check the flags that need no files (run before anything is read or packed)."""
    pools = parse_profiles(opts.profiles, validate=opts.validate)
    overrides = parse_overrides(opts.overrides, validate=opts.validate)
    if opts.validate:
        if opts.retries is not None and opts.retries < 0:
            raise usage(f"--retries {opts.retries}: must be 0 or more")
        if not -100 <= opts.priority <= 100:
            raise usage(f"--priority {opts.priority}: must be between -100 and 100")
        if opts.train_dataset:
            parse_dataset_ref(opts.train_dataset, "--train-dataset")
        for text in opts.secrets:
            parse_secret_ref(text)
        for stage in opts.then:
            if not _POOL_NAME.match(stage):
                raise usage(f"--then {stage!r}: expected a stage name such as export or eval")
    return pools, overrides


def read_experiment(lab: Lab, opts: SubmitOptions) -> ExperimentFiles:
    """Read (and with validation, check) the experiment's files."""
    exp = lab.experiment(opts.experiment)
    doc, config = exp.load_config()
    lock = exp.load_lock()
    if opts.validate:
        if lock.method == CUSTOM_METHOD and not exp.train_sh.is_file():
            raise usage(
                f"{exp.rel(exp.train_sh)} not found: custom/custom runs it as the training command",
                hint=f"create it (see `sf new {exp.name} --method custom/custom` for a template)",
            )
        obs = config.get("observability")
        if obs is not None and obs not in _OBSERVABILITY:
            raise doc.error(("observability",), f"`observability` must be platform or external, got {obs!r}")
        image = config.get("image")
        if image is not None and not isinstance(image, str):
            raise doc.error(("image",), "`image` must be an image reference string")
        secret_refs(config, opts.secrets)
    return ExperimentFiles(experiment=exp, config=config, config_text=doc.text, lock=lock)


def observability(config: dict[str, Any], url: str, *, validate: bool, tool: str = "") -> job_spec_pb2.Observability:
    """--observability-url means external; else config.yaml `observability`; else the method default.
    --observability-tool names the tracker when the URL does not say it (the console checks both)."""
    if tool and not url:
        raise usage("--observability-tool names the tracker of --observability-url URL; pass the URL too")
    if url:
        return job_spec_pb2.Observability(mode=job_spec_pb2.OBSERVABILITY_MODE_EXTERNAL, url=url, tool=tool)
    mode = _OBSERVABILITY.get(str(config.get("observability", "")), job_spec_pb2.OBSERVABILITY_MODE_UNSPECIFIED)
    if validate and mode == job_spec_pb2.OBSERVABILITY_MODE_EXTERNAL:
        raise usage("config.yaml says `observability: external`: pass the tracker with --observability-url URL")
    return job_spec_pb2.Observability(mode=mode)


def build_spec(
    lab: Lab,
    files: ExperimentFiles,
    opts: SubmitOptions,
    pack: Pack,
    *,
    pools: list[job_spec_pb2.PoolRequest],
    overrides: list[job_spec_pb2.Override],
    client_host: str | None = None,
    by_digest: bool = False,
) -> job_spec_pb2.JobSpec:
    """Assemble the JobSpec from the lab, the experiment, the packed workspace and the flags;
    `by_digest`: the workspace is named by its manifest digest, the spec lists no files (nor
    makes the manifest message)."""
    config_image = files.config.get("image")
    train_data = job_spec_pb2.DataRef(path=opts.train_data, dataset=opts.train_dataset)
    git = pack.git
    provenance = job_spec_pb2.Provenance(
        git_commit=git.commit if git else "",
        git_branch=git.branch if git else "",
        git_dirty=pack.dirty,
        untracked_files=pack.untracked,
        config_snapshot=files.config_text,
        client_version=cli.__version__,
        client_host=client_host if client_host is not None else socket.gethostname(),
    )
    spec = job_spec_pb2.JobSpec(
        api_version=API_VERSION,
        project=lab.settings.project,
        experiment=files.experiment.name,
        method=files.lock.method,
        recipe_lock=files.lock,
        pools=pools,
        config_json=config_to_json(files.config, files.experiment.rel(files.experiment.config_path)),
        overrides=overrides,
        model=opts.model,
        image=opts.image or (config_image if isinstance(config_image, str) else ""),
        workspace=None if by_digest else pack.manifest,
        provenance=provenance,
        observability=observability(
            files.config, opts.observability_url, validate=opts.validate, tool=opts.observability_tool
        ),
        then_stages=opts.then,
        retry_budget=opts.retries,
        priority=opts.priority,
        queue=opts.queue,
        fleet=opts.fleet,
        framework_version=opts.framework_version,
        labels=opts.labels,
        env=opts.env,
        secrets=secret_refs(files.config, opts.secrets),
    )
    if opts.train_data or opts.train_dataset:
        spec.train_data.CopyFrom(train_data)
    if opts.validation_data:
        spec.validation_data.CopyFrom(job_spec_pb2.DataRef(path=opts.validation_data))
    return spec


def check_workspace_paths(pack: Pack, opts: SubmitOptions) -> None:
    """--train-data / --validation-data that are lab paths must be packed (else the job cannot read them)."""
    packed = {f.path for f in pack.files}
    for flag, value, in_dataset in (
        ("--train-data", opts.train_data, bool(opts.train_dataset)),
        ("--validation-data", opts.validation_data, False),
    ):
        if not value or in_dataset or "://" in value:
            continue
        rel = value.strip("/").removeprefix("./")
        if rel in packed or any(p.startswith(rel + "/") for p in packed):
            continue
        raise usage(
            f"{flag} {value}: not in the packed lab (paths are relative to the lab root)",
            hint="commit it to git, or list it in package.include of starforge.yaml",
        )
