"""verl and NeMo-RL methods checked against the real frameworks, per framework version.

- The key data under recipes/frameworks/ is what the frameworks themselves give (regenerated here
  from the installed verl package and from the NeMo-RL reference files in ../shared/frameworks).
- NeMo-RL: the scripts the adapter and the recipes run exist at the pinned upstream commit, the
  base configs exist, and every override the adapter generates names a key of the merged config.
- verl: Hydra composes ppo_trainer in strict mode with the adapter's overrides plus a user's -s,
  for every verl version of the runtime matrix (the installed one, and the others' config trees
  from their wheels in build/frameworks, `make frameworks`).
- Admission (recipes/params.py) takes any real framework key and refuses one the framework does
  not have, with the nearest valid names.
"""

from __future__ import annotations

import json
import pathlib
import shlex
import subprocess

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException

from capsule.runner.adapters import nemo_rl as nemo_rl_adapter
from common import errors
from recipes import framework_keys
from tests.unit.recipes.helpers import CATALOG, Job, pool, resolved

REPO = pathlib.Path(__file__).resolve().parents[3]


def _shared() -> pathlib.Path:
    """shared/ beside the clone; for a git worktree, beside the clone it belongs to."""
    common = subprocess.run(
        ["git", "rev-parse", "--path-format=absolute", "--git-common-dir"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    candidates = [REPO.parent / "shared"] + ([pathlib.Path(common).parent.parent / "shared"] if common else [])
    found = next((c for c in candidates if (c / "frameworks").is_dir()), None)
    assert found is not None, f"the framework reference files are missing: expected shared/frameworks at {candidates}"
    return found


NEMO_RL = _shared() / "frameworks" / "nemo-rl"
NEMO_RL_VERSION = "0.5.0"
VERL_VERSIONS = sorted({r.framework_version for m in ("verl/ppo", "verl/grpo") for r in CATALOG.recipes[m].runtimes})
NEMO_RL_SOURCE = "NVIDIA-NeMo/RL@7ea279abfbeb698b092856d0dab61e7cf39bc909 (examples/configs, examples-files.txt)"


def _committed(framework: str, version: str) -> dict[str, object]:
    loaded: dict[str, object] = json.loads((framework_keys.DATA_ROOT / framework / f"{version}.json").read_text())
    return loaded


def _same_json(data: dict[str, object]) -> dict[str, object]:
    loaded: dict[str, object] = json.loads(json.dumps(data, sort_keys=True, default=str))
    return loaded


def test_runtime_versions_have_key_data() -> None:
    for name in ("verl/ppo", "verl/grpo", "nemo-rl/sft", "nemo-rl/grpo"):
        decl = CATALOG.recipes[name]
        for runtime in decl.runtimes:
            assert framework_keys.load(decl.framework, runtime.framework_version) is not None, (name, runtime)


def test_nemo_rl_data_is_the_upstream_files() -> None:
    regenerated = framework_keys.generate_nemo_rl(NEMO_RL, NEMO_RL_SOURCE)
    assert _same_json(regenerated) == _committed("nemo-rl", NEMO_RL_VERSION)


def test_the_matrix_has_several_verl_versions() -> None:
    assert len(VERL_VERSIONS) >= 2, VERL_VERSIONS


@pytest.mark.parametrize("version", VERL_VERSIONS)
def test_verl_data_is_the_composed_trainer_config(version: str) -> None:
    regenerated = framework_keys.generate_verl(f"verl=={version} (PyPI)", framework_keys.verl_config_dir(version))
    assert _same_json(regenerated) == _committed("verl", version)


# -- NeMo-RL ------------------------------------------------------------------------------------


@pytest.fixture
def nemo_job(tmp_path: pathlib.Path) -> Job:
    """A job whose NEMO_RL_HOME is the reference tree: only files that exist upstream exist."""
    job = Job(tmp_path)
    home = tmp_path / "nemo-rl"
    for rel in NEMO_RL.joinpath("examples-files.txt").read_text().split():
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text("")
    for config in NEMO_RL.glob("examples/configs/*.yaml"):
        target = home / "examples" / "configs" / config.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(config.read_bytes())
    job.environ["NEMO_RL_HOME"] = str(home)
    return job


@pytest.mark.parametrize("method", ["nemo-rl/sft", "nemo-rl/grpo"])
def test_nemo_rl_commands_fit_the_pinned_tree(nemo_job: Job, method: str) -> None:
    scripts = set(NEMO_RL.joinpath("examples-files.txt").read_text().split())
    decl = CATALOG.recipes[method]
    assert shlex.split(decl.entrypoint)[1] in scripts
    assert nemo_rl_adapter.SCRIPTS[method.split("/", maxsplit=1)[1]] in scripts
    assert shlex.split(decl.stage_commands["export"])[1] in scripts
    nemo_job.file("data/train.jsonl")
    nemo_job.file("data/val.jsonl")
    command = nemo_job.command(
        method,
        overrides=["policy.dtensor_cfg.sequence_parallel=true"],  # a real key the recipe does not declare
        train_data="data/train.jsonl",
        validation_data="data/val.jsonl",
        pools=[pool("main", "h100", 1, 8)],
    )
    base = command.argv[3]
    found = framework_keys.config_keys("nemo-rl", NEMO_RL_VERSION, {"base_config": base})
    assert found is not None, base
    keys = found[1]
    plain = [a.split("=", 1)[0] for a in command.argv[4:] if not a.startswith("++")]
    assert [k for k in plain if k not in keys] == []
    # force-added keys are only the data paths NeMo-RL's configs document in their comments
    added = {a[2:].split("=", 1)[0] for a in command.argv[4:] if a.startswith("++")}
    assert added == {"data.train.data_path", "data.validation.data_path", "data.validation.dataset_name"}


def test_nemo_rl_inherited_config_resolves_its_defaults() -> None:
    data = _committed("nemo-rl", NEMO_RL_VERSION)
    configs = data["configs"]
    assert isinstance(configs, dict)
    eight, one = configs["examples/configs/grpo_math_8B.yaml"], configs["examples/configs/grpo_math_1B.yaml"]
    # grpo_math_8B.yaml names only what differs; the rest comes from grpo_math_1B.yaml
    assert set(one) <= set(eight)
    assert eight["grpo.num_prompts_per_step"] == 64


@pytest.mark.parametrize(
    ("method", "version"),
    [
        (m, r.framework_version)
        for m in ("nemo-rl/sft", "nemo-rl/grpo", "verl/ppo", "verl/grpo")
        for r in CATALOG.recipes[m].runtimes
    ],
)
def test_every_declared_parameter_is_a_framework_key(method: str, version: str) -> None:
    decl = CATALOG.recipes[method]
    config = {p.key: p.default for p in decl.parameters}
    found = framework_keys.config_keys(decl.framework, version, config)
    assert found is not None
    starforge_only = {"base_config"}
    missing = [
        p.maps_to or p.key
        for p in decl.parameters
        if p.key not in starforge_only and (p.maps_to or p.key) not in found[1]
    ]
    assert missing == []


# -- verl ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERL_VERSIONS)
@pytest.mark.parametrize(
    ("method", "pools"),
    [
        ("verl/ppo", [pool("main", "h100", 1, 8)]),
        ("verl/grpo", [pool("train", "h200", 2, 8), pool("rollout", "h100", 1, 2)]),
    ],
)
def test_verl_composes_strictly_with_our_overrides(
    tmp_path: pathlib.Path, method: str, pools: list[dict[str, object]], version: str
) -> None:
    job = Job(tmp_path)
    job.file("models/m/config.json")
    job.file("data/train.parquet")
    job.file("data/val.parquet")
    argv = job.command(
        method,
        overrides=["trainer.max_actor_ckpt_to_keep=2"],  # a real key the recipe does not declare
        model="models/m",
        train_data="data/train.parquet",
        validation_data="data/val.parquet",
        pools=pools,
    ).argv
    assert argv[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    overrides = [a for a in argv[3:] if not a.startswith("hydra.")]  # Hydra's own run dir
    with initialize_config_dir(config_dir=str(framework_keys.verl_config_dir(version)), version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=overrides)
        assert cfg.trainer.max_actor_ckpt_to_keep == 2
        with pytest.raises(ConfigCompositionException):
            compose(config_name="ppo_trainer", overrides=[*overrides, "trainer.save_freqq=3"])


# -- admission -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "override", "nearest"),
    [
        ("verl/ppo", "trainer.save_freqq=3", "did you mean trainer.save_freq"),
        ("nemo-rl/sft", "sft.val_batchs=2", "did you mean sft.val_batches"),
        ("nemo-rl/grpo", "policy.max_grad_normm=1", "did you mean policy.max_grad_norm"),
    ],
)
def test_admission_refuses_what_the_framework_would(method: str, override: str, nearest: str) -> None:
    with pytest.raises(errors.InvalidArgument, match=r"neither a parameter of .* nor a key of") as caught:
        resolved(method, overrides=[override])
    assert nearest in caught.value.message


def test_admission_takes_real_undeclared_framework_keys() -> None:
    config = resolved("verl/grpo", overrides=["trainer.max_actor_ckpt_to_keep=2", "trainer.balance_batch=false"])
    assert config["trainer"]["max_actor_ckpt_to_keep"] == 2
    assert config["trainer"]["balance_batch"] is False
    config = resolved("nemo-rl/sft", {"policy": {"dtensor_cfg": {"sequence_parallel": True}}})
    assert config["policy"]["dtensor_cfg"]["sequence_parallel"] is True
    # with a lab base_config the keys are the lab's: only declared parameters are checked
    config = resolved("nemo-rl/sft", {"base_config": "configs/mine.yaml"}, ["sft.max_num_steps=3"])
    assert config["sft"]["max_num_steps"] == 3
    with pytest.raises(errors.InvalidArgument, match="has no parameter"):
        resolved("nemo-rl/sft", {"base_config": "configs/mine.yaml"}, ["sft.max_num_stepz=3"])


# Keys one verl version has and the other does not (from the two key files): each version's
# submissions are checked against that version's own config.
ONLY_IN = {"0.9.1": "actor_rollout_ref.rollout.router_config_path=r.yaml", "0.9.0": "data.continuous_token.enable=true"}


@pytest.mark.parametrize("version", sorted(ONLY_IN))
def test_admission_checks_each_verl_version_against_its_own_keys(version: str) -> None:
    other = next(v for v in ONLY_IN if v != version)
    own = ONLY_IN[version]
    config = resolved("verl/grpo", overrides=[own], framework_version=version)
    assert config  # taken by its own version
    with pytest.raises(errors.InvalidArgument, match=f"nor a key of verl {other}"):
        resolved("verl/grpo", overrides=[own], framework_version=other)


# -- TRL -----------------------------------------------------------------------------------------

TRL_METHODS = ("trl/sft", "trl/dpo", "trl/kto", "trl/grpo")
TRL_VERSIONS = sorted({r.framework_version for m in TRL_METHODS for r in CATALOG.recipes[m].runtimes})
# What TRL's CLI takes besides its config dataclasses: accelerate's launcher option.
TRL_LAUNCHER_FLAGS = {"num_processes"}


def _trl_sources(version: str) -> dict[str, str]:
    """{path: source} of TRL `version`'s Python files: the installed package's when it is that
    version, else those in its wheel in build/frameworks (`make frameworks`)."""
    import importlib.metadata
    import importlib.util
    import zipfile

    if importlib.metadata.version("trl") == version:
        spec = importlib.util.find_spec("trl")
        assert spec is not None and spec.submodule_search_locations
        root = pathlib.Path(next(iter(spec.submodule_search_locations)))
        return {str(p): p.read_text() for p in root.rglob("*.py")}
    wheel = framework_keys.WHEEL_DIR / f"trl-{version}-py3-none-any.whl"
    assert wheel.is_file(), f"trl {version} is neither installed nor in {wheel.parent}: run `make frameworks`"
    with zipfile.ZipFile(wheel) as z:
        return {n: z.read(n).decode() for n in z.namelist() if n.startswith("trl/") and n.endswith(".py")}


def _trl_fields(version: str) -> set[str]:
    """Every dataclass field TRL `version` declares (its configs, ScriptArguments, ModelConfig),
    plus transformers' TrainingArguments, which its configs extend."""
    import ast
    import dataclasses

    from transformers import TrainingArguments

    names = {f.name for f in dataclasses.fields(TrainingArguments)}
    for source in _trl_sources(version).values():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef):
                names.update(
                    b.target.id for b in node.body if isinstance(b, ast.AnnAssign) and isinstance(b.target, ast.Name)
                )
    return names


def test_the_matrix_has_several_trl_versions() -> None:
    assert len(TRL_VERSIONS) >= 2, TRL_VERSIONS


@pytest.mark.parametrize("version", TRL_VERSIONS)
@pytest.mark.parametrize("method", TRL_METHODS)
def test_trl_takes_every_flag_we_pass_in_each_version(tmp_path: pathlib.Path, method: str, version: str) -> None:
    decl = CATALOG.recipes[method]
    if decl.runtime(version) is None:
        pytest.fail(f"{method} lacks trl {version}: every trl method publishes the same versions")
    job = Job(tmp_path)
    job.tool("trl")
    job.file("models/m/config.json")
    job.file("data/train.jsonl")
    job.file("data/val.jsonl")
    argv = job.command(
        method,
        overrides=["reward_funcs=accuracy_reward"] if method == "trl/grpo" else [],
        model="models/m",
        train_data="data/train.jsonl",
        validation_data="data/val.jsonl",
        pools=[pool("main", "h100", 1, 8)],
    ).argv
    flags = {a[2:] for a in argv if a.startswith("--")} - TRL_LAUNCHER_FLAGS
    declared = {p.maps_to or p.key for p in decl.parameters}
    unknown = sorted((flags | declared) - _trl_fields(version))
    assert unknown == [], f"trl {version} has no such option: {unknown}"
