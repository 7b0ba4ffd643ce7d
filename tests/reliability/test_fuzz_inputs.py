"""Bad input, fuzzed with hypothesis, where no socket is needed: every input meets a clean refusal
(the component's own error type, a message for a person), never a crash, never a write outside
where the component may write.

- JobSpecs (random fields, strings, paths, unicode, extreme numbers; mutations of a valid spec so
  the deep checks are reached) through the real admission, `control.admission.admit`;
- workspace manifests with hostile paths: admission and the executor's materialisation
  (`executor_svc.bundle.materialize`) agree on what is safe, and materialisation writes nothing
  outside the attempt's directories even with symlinks planted in them;
- labs with symlinks out of the tree, absolute and looping links, huge (sparse) files and many
  files through the packer (`cli.pack`);
- `sf` command lines (typer's CliRunner on the real app): exit codes 0-5 only, no traceback;
- configuration files (random YAML, typed and mistyped) of the control plane, every executor kind,
  forgelet and the CLI.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import os
import pathlib
import subprocess
import types
import typing
from collections.abc import Iterator
from typing import Any

import pytest
import typer.main
import yaml
from hypothesis import given
from hypothesis import strategies as st
from starforge_api.executor.v1 import executor_service_pb2 as ex_pb
from starforge_api.executor.v1 import launch_request_pb2 as lr_pb
from starforge_api.job.v1 import job_spec_pb2, workspace_pb2
from typer.testing import CliRunner

from cli import client as cli_client
from cli import config as cli_config
from cli import pack
from cli.errors import CliError
from cli.lab import LabSettings, load_settings
from cli.main import app
from common import errors, sensitive
from common.config import ConfigError
from control import admission
from control import config as control_config
from control.auth import Principal
from control.blobstore import BlobStore
from control.catalog_api import lock_for
from control.config import ControlConfig, FleetConfig, InventoryConfig
from control.executors import FleetStatus
from executor_svc import bundle
from executor_svc.config import load_service_config
from executor_svc.plumbing.paths import check_relative_path
from executor_svc.registry import get_kind, valid_kinds
from forgelet import config as forgelet_config
from recipes.catalog import load_catalog
from tests.reliability.fuzzing import fuzz_settings, hostile_paths, mutated, text

REFUSALS = (errors.InvalidArgument, errors.FailedPrecondition, errors.NotFound, errors.PermissionDenied)
TRAIN = b"#!/usr/bin/env bash\necho hi\n"
ADMIN = Principal(user="admin", admin=True, kind="pat", token_id="t-admin")
ALICE = Principal(user="alice", admin=False, kind="pat", token_id="t-alice")


# -- admission --------------------------------------------------------------------------------


class AdmissionWorld:
    """The console-side inputs of admission: config, blob store, fleets as the executors told, a valid spec."""

    def __init__(self, cfg: ControlConfig, store: BlobStore, executors: Any, base: job_spec_pb2.JobSpec, catalog: Any):
        self.cfg, self.store, self.executors, self.base, self.catalog = cfg, store, executors, base, catalog

    def __repr__(self) -> str:
        return "AdmissionWorld()"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> AdmissionWorld:
    root = tmp_path_factory.mktemp("admission")
    store = BlobStore(root / "blobs")
    digest = store.put_bytes(TRAIN)
    catalog = load_catalog()
    fleets = [
        FleetConfig("local", "local", "127.0.0.1:1", [InventoryConfig("cpu", 1, 0, 4)]),
        FleetConfig("gpus", "slurm", "127.0.0.1:2", [InventoryConfig("h200", 4, 8)]),
    ]
    cfg = ControlConfig(
        state_dir=root, fleets=fleets, default_images={"custom": "host"}, image_allowlist=["registry.example/"]
    )
    status = {
        "local": FleetStatus(fleets[0], reachable=True, ever_reachable=True, runtime="process"),
        "gpus": FleetStatus(
            fleets[1],
            reachable=True,
            ever_reachable=True,
            runtime="slurm",
            capabilities=frozenset(
                {
                    ex_pb.EXECUTOR_CAPABILITY_MULTI_NODE,
                    ex_pb.EXECUTOR_CAPABILITY_MULTI_POOL,
                    ex_pb.EXECUTOR_CAPABILITY_GPUS,
                }
            ),
        ),
    }
    base = job_spec_pb2.JobSpec(
        api_version="forge/v2",
        project="@admin/lab",
        experiment="exp",
        method="custom/custom",
        recipe_lock=lock_for(catalog, "custom/custom", ""),
        config_json=json.dumps({"image": "host", "observability": "platform"}),
        workspace=workspace_pb2.WorkspaceManifest(
            files=[workspace_pb2.WorkspaceFile(path="experiments/exp/train.sh", sha256=digest, size=len(TRAIN))]
        ),
    )
    return AdmissionWorld(cfg, store, types.SimpleNamespace(status=status), base, catalog)


def _admit(w: AdmissionWorld, spec: job_spec_pb2.JobSpec, who: Principal = ADMIN) -> admission.Admitted | None:
    """Admitted, or None for a clean refusal; anything else fails the test."""
    try:
        return admission.admit(spec, who, w.cfg, w.catalog, w.store, w.executors)
    except REFUSALS as e:
        refused = e
    assert refused.message and "Traceback" not in refused.message
    return None


def test_the_base_spec_is_admitted(world: AdmissionWorld) -> None:
    assert _admit(world, world.base) is not None  # else the fuzz below only ever meets the first check


@fuzz_settings(300)
@given(data=st.data())
def test_admission_refuses_random_job_specs_cleanly(world: AdmissionWorld, data: st.DataObject) -> None:
    spec = data.draw(mutated(world.base))
    _admit(world, typing.cast(job_spec_pb2.JobSpec, spec), data.draw(st.sampled_from([ADMIN, ALICE])))


@fuzz_settings(150)
@given(paths=st.lists(hostile_paths(), min_size=1, max_size=4))
def test_admission_and_the_executor_agree_on_workspace_paths(world: AdmissionWorld, paths: list[str]) -> None:
    spec = job_spec_pb2.JobSpec()
    spec.CopyFrom(world.base)
    train = spec.workspace.files[0]
    for p in paths:
        spec.workspace.files.add(path=p, sha256=train.sha256, size=train.size)
    admitted = _admit(world, spec)
    if admitted is not None:  # what admission lets through, the executor must accept too
        for i, f in enumerate(spec.workspace.files):
            check_relative_path(f.path, f"spec.workspace.files[{i}].path")


# -- materialisation ----------------------------------------------------------------------------


def _tree(root: pathlib.Path, skip: tuple[pathlib.Path, ...] = ()) -> dict[str, tuple[str, int]]:
    """Every entry under `root` (not following links): kind and size, for before/after snapshots."""
    out: dict[str, tuple[str, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = pathlib.Path(dirpath)
        dirnames[:] = [d for d in dirnames if here / d not in skip]
        for name in dirnames + filenames:
            p = here / name
            st_ = p.lstat()
            kind = "link" if p.is_symlink() else "dir" if p.is_dir() else "file"
            out[str(p.relative_to(root))] = (kind, 0 if kind == "dir" else st_.st_size)
    return out


@fuzz_settings(150)
@given(
    paths=st.lists(hostile_paths(), min_size=1, max_size=5),
    links=st.lists(
        st.tuples(st.sampled_from(["a", "b", "experiments", "x/y"]), st.sampled_from(["outside", "/", "..", "."])),
        max_size=3,
    ),
    dataset=st.one_of(st.none(), st.sampled_from(["", "../x", "ok_name", "a/b", "1abc", "_x"])),
)
def test_materialize_writes_nothing_outside_the_attempt(
    tmp_path_factory: pytest.TempPathFactory, paths: list[str], links: list[tuple[str, str]], dataset: str | None
) -> None:
    root = tmp_path_factory.mktemp("mat")
    outside = root / "outside"
    outside.mkdir()
    (outside / "secret").write_text("do not touch")
    cache, attempt = root / "cache", root / "attempt"
    capsule_dir, workspace_dir, datasets_dir = attempt / "capsule", attempt / "workspace", attempt / "datasets"
    for d in (capsule_dir, workspace_dir, datasets_dir):
        d.mkdir(parents=True)
    data = b"payload\n"
    digest = hashlib.sha256(data).hexdigest()
    (cache / digest[:2]).mkdir(parents=True)
    (cache / digest[:2] / digest).write_bytes(data)
    for where, target in links:  # links planted in the destination, pointing out of it
        link = workspace_dir / where
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists() and not link.is_symlink():
            link.symlink_to(outside if target == "outside" else pathlib.Path(target))
    request = lr_pb.LaunchRequest(attempt_id="jfuzz.1", job_id="jfuzz")
    for p in paths:
        request.spec.workspace.files.add(path=p, sha256=digest, size=len(data), executable=len(p) % 2 == 0)
        request.capsule.files.add(path=p, sha256=digest, size=len(data))
    if dataset is not None:
        request.datasets.add(name=dataset).manifest.files.add(path=paths[0], sha256=digest, size=len(data))
    before = _tree(root, skip=(attempt, cache))
    with contextlib.suppress(errors.InvalidArgument):  # refused: fine, as long as nothing leaked
        asyncio.run(bundle.materialize(request, capsule_dir, workspace_dir, cache, datasets_dir))
    assert _tree(root, skip=(attempt, cache)) == before, "materialize wrote outside the attempt's directories"
    assert (outside / "secret").read_text() == "do not touch"
    for d in (capsule_dir, workspace_dir, datasets_dir):  # and inside, no file went through a link
        for dirpath, _dirs, files in os.walk(d):
            for f in files:
                file = pathlib.Path(dirpath) / f
                if not file.is_symlink():
                    assert file.resolve().is_relative_to(d.resolve()), file


# -- packing ------------------------------------------------------------------------------------


def _git(cwd: pathlib.Path, *args: str) -> None:
    env = dict(
        os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@x", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@x"
    )
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def _lab(root: pathlib.Path) -> pathlib.Path:
    lab = root / "lab"
    (lab / "experiments" / "exp").mkdir(parents=True)
    (lab / "starforge.yaml").write_text('project: "@admin/lab"\n')
    (lab / "experiments" / "exp" / "train.sh").write_text("echo hi\n")
    (root / "outside.txt").write_text("secret outside the lab\n")
    _git(lab, "init", "-q")
    return lab


def _commit(lab: pathlib.Path) -> None:
    _git(lab, "add", "-A")
    _git(lab, "commit", "-qm", "lab", "--allow-empty")


LINK_CASES = {
    "absolute link out of the lab": ("evil", "/etc/passwd"),
    "relative link out of the lab": ("evil", "../outside.txt"),
    "link to the lab's parent": ("up", ".."),
    "folder link to an ancestor": ("experiments/exp/loop", "../.."),
    "link loop": ("loop1", "loop2"),
    "broken link": ("dangling", "missing-file"),
}


@pytest.mark.parametrize("case", sorted(LINK_CASES))
def test_pack_refuses_links_leaving_the_lab(tmp_path: pathlib.Path, case: str) -> None:
    lab = _lab(tmp_path)
    name, target = LINK_CASES[case]
    (lab / name).symlink_to(target)
    if case == "link loop":
        (lab / "loop2").symlink_to("loop1")
    _commit(lab)
    with pytest.raises(CliError) as refused:
        pack.pack_lab(lab, load_settings(lab / "starforge.yaml"), use_cache=False)
    assert refused.value.exit_code == 2 and name in " ".join(refused.value.details), refused.value


def test_pack_refuses_a_huge_sparse_file_without_reading_it(tmp_path: pathlib.Path) -> None:
    lab = _lab(tmp_path)
    _commit(lab)
    big = lab / "data" / "huge.bin"
    big.parent.mkdir()
    with big.open("wb") as f:  # 64 GiB that take no disk: only its size is real
        f.truncate(64 << 30)
    settings = LabSettings(project="@admin/lab", include=("data/**",))
    with pytest.raises(CliError) as refused:
        pack.pack_lab(lab, settings, use_cache=False, allow_dirty=True)
    assert refused.value.exit_code == 2 and "data/huge.bin" in " ".join(refused.value.details)


def test_pack_takes_many_small_files(tmp_path: pathlib.Path) -> None:
    lab = _lab(tmp_path)
    many = lab / "many"
    for i in range(2000):
        (many / f"d{i % 20}").mkdir(parents=True, exist_ok=True)
        (many / f"d{i % 20}" / f"f{i}.txt").write_text(str(i))
    _commit(lab)
    packed = pack.pack_lab(lab, load_settings(lab / "starforge.yaml"), use_cache=False)
    assert len(packed.files) == 2000 + 2
    assert all(check_relative_path(f.path, "p") for f in packed.manifest.files)


@fuzz_settings(60)
@given(names=st.lists(st.text(alphabet="ab.\n\\ é-_", min_size=1, max_size=8), min_size=1, max_size=4))
def test_pack_refuses_or_packs_odd_file_names(tmp_path_factory: pytest.TempPathFactory, names: list[str]) -> None:
    lab = _lab(tmp_path_factory.mktemp("names"))
    for n in names:
        if n in (".", "..") or "/" in n:
            continue
        try:
            (lab / n).write_text("x")
        except (IsADirectoryError, FileExistsError):
            continue
    settings = LabSettings(project="@admin/lab", include=("**",))
    try:
        packed = pack.pack_lab(lab, settings, use_cache=False, allow_dirty=True)
    except CliError as e:
        refused = e
    else:
        for f in packed.manifest.files:  # what the packer lets through, the console and executor accept
            assert sensitive.bad_path(f.path) is None, f.path
            check_relative_path(f.path, "p")
        return
    assert refused.exit_code == 2


# -- the sf command line --------------------------------------------------------------------------

# `up` and `down` start and stop local servers by PID file: they are not fuzzed (tests/integration
# covers them); every other command is.
SKIPPED_COMMANDS = {("up",), ("down",)}


def _commands() -> list[tuple[tuple[str, ...], list[str], int]]:
    out: list[tuple[tuple[str, ...], list[str], int]] = []

    def walk(cmd: Any, path: tuple[str, ...]) -> None:
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in sorted(subs.items()):
                walk(sub, (*path, name))
        elif path not in SKIPPED_COMMANDS:
            opts = [o for p in cmd.params for o in p.opts if o.startswith("-")]
            positional = sum(1 for p in cmd.params if not any(o.startswith("-") for o in p.opts))
            out.append((path, opts, positional))

    walk(typer.main.get_command(app), ())
    return out


COMMANDS = _commands()
OPTION_VALUES = ["json", "text", "1", "0", "-1", "99999999999999999999", "cpu", "h200:8", "a=b", "=", "30d", "1h", "x"]


@st.composite
def argv(draw: st.DrawFn) -> list[str]:
    path, opts, positional = draw(st.sampled_from(COMMANDS))
    args = list(path)
    for _ in range(draw(st.integers(0, 4))):
        if bool(opts) and draw(st.booleans()):
            args.append(draw(st.sampled_from(opts)))
            if draw(st.booleans()):
                args.append(draw(st.one_of(st.sampled_from(OPTION_VALUES), text())))
        else:
            args.append(draw(text()))
    if draw(st.booleans()):
        args += [draw(text()) for _ in range(positional)]
    if path == ("init",):  # `sf init DIR` makes DIR wherever it is told: keep it in the test's folder
        args = [a if not (a.startswith("/") or ".." in a or a.startswith("~")) else "lab" for a in args]
    return args


@pytest.fixture
def cli_home(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[pathlib.Path]:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.chdir(tmp_path)
    # nothing listens on the console address: no second and third try (1.3 s a command) for that
    monkeypatch.setattr(cli_client, "CONNECT_RETRIES", ())
    yield home


@fuzz_settings(200)
@given(args=argv())
def test_sf_command_lines_exit_cleanly(cli_home: pathlib.Path, args: list[str]) -> None:
    env = {
        "HOME": str(cli_home),
        "STARFORGE_CONSOLE": "127.0.0.1:9",  # discard port: nothing listens, calls fail fast
        "STARFORGE_TOKEN": "sfp_fuzz",
        "STARFORGE_CLIENT_CONFIG": str(cli_home / "client.yaml"),
        "NO_COLOR": "1",
        "SF_DEBUG": "",
    }
    before = sorted(p.name for p in cli_home.parent.parent.iterdir())
    result = CliRunner().invoke(app, args, env=env, input="")
    output = result.output
    assert result.exit_code in (0, 1, 2, 3, 4, 5, 130), (args, result.exit_code, output)
    assert "Traceback" not in output and "failed unexpectedly" not in output, (args, output)
    if result.exit_code == 130:
        assert "aborted" in output, (args, output)  # a prompt met the end of input
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), (
        args,
        repr(result.exception),
    )
    assert sorted(p.name for p in cli_home.parent.parent.iterdir()) == before, "sf wrote outside its folder"


# -- configuration files ------------------------------------------------------------------------


def _anything() -> st.SearchStrategy[Any]:
    leaves = st.one_of(
        st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), text(), st.binary(max_size=8)
    )
    return st.recursive(
        leaves, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text(), inner, max_size=3), max_leaves=8
    )


def _for_type(tp: Any, depth: int) -> st.SearchStrategy[Any]:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _doc(tp, depth + 1) if depth < 3 else st.just({})
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(_for_type(a, depth) for a in args))
    if origin in (list, tuple):
        return st.lists(_for_type(args[0] if args else Any, depth), max_size=3)
    if origin is dict:
        return st.dictionaries(text(), _for_type(args[1] if args else Any, depth), max_size=3)
    simple: dict[Any, st.SearchStrategy[Any]] = {
        bool: st.booleans(),
        int: st.integers(-(2**40), 2**40),
        float: st.floats(allow_nan=True, allow_infinity=True),
        str: text(),
        pathlib.Path: text(),
        type(None): st.none(),
    }
    return simple.get(tp, _anything())


def _doc(cls: type, depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    hints = typing.get_type_hints(cls)
    fields = {f.name: st.one_of(_for_type(hints[f.name], depth), _anything()) for f in dataclasses.fields(cls)}
    return st.fixed_dictionaries({}, optional=fields)


def _yaml(doc: st.SearchStrategy[Any]) -> st.SearchStrategy[str]:
    dumped = doc.map(lambda d: yaml.safe_dump(d, allow_unicode=True))
    return st.one_of(dumped, dumped, st.text(max_size=200), st.sampled_from(["", "---", "[]", "- a", "a: [", "{a: 1"]))


def _write(tmp: pathlib.Path, content: str) -> pathlib.Path:
    path = tmp / "config.yaml"
    path.write_text(content)
    return path


def _env(values: dict[str, str], prefix: str) -> dict[str, str]:
    return {prefix + k.upper(): v for k, v in values.items()}


ENV_KEYS = st.dictionaries(
    st.sampled_from(["listen", "fleets", "state_dir", "local__runtime", "token", "x"]), text(), max_size=2
)


@fuzz_settings(150)
@given(content=_yaml(_doc(ControlConfig)), env=ENV_KEYS)
def test_control_config_files_load_or_refuse(
    tmp_path_factory: pytest.TempPathFactory, content: str, env: dict[str, str]
) -> None:
    path = _write(tmp_path_factory.mktemp("cfg"), content)
    try:
        cfg = control_config.load(path, _env(env, "STARFORGE_"))
    except ConfigError:
        return
    assert isinstance(cfg, ControlConfig)


KINDS = valid_kinds()


@fuzz_settings(40)
@given(data=st.data(), env=ENV_KEYS)
@pytest.mark.parametrize("kind", KINDS)
def test_executor_config_files_load_or_refuse(
    tmp_path_factory: pytest.TempPathFactory, kind: str, data: st.DataObject, env: dict[str, str]
) -> None:
    k = get_kind(kind)
    doc = st.fixed_dictionaries(
        {}, optional={kind: _doc(k.config_class), "listen": text(), "token": text(), "log_level": text()}
    )
    path = _write(tmp_path_factory.mktemp("cfg"), data.draw(_yaml(doc)))
    try:
        load_service_config(kind, k.config_class, path, _env(env, "STARFORGE_EXECUTOR_"))
    except ConfigError:
        return


@fuzz_settings(100)
@given(content=_yaml(_doc(forgelet_config.ForgeletConfig)), env=ENV_KEYS)
def test_forgelet_config_files_load_or_refuse(
    tmp_path_factory: pytest.TempPathFactory, content: str, env: dict[str, str]
) -> None:
    path = _write(tmp_path_factory.mktemp("cfg"), content)
    try:
        forgelet_config.load(path, _env(env, "STARFORGE_FORGELET_"))
    except ConfigError:
        return


@fuzz_settings(100)
@given(
    client=_yaml(st.fixed_dictionaries({}, optional={"console": text(), "token": text(), "x": _anything()})),
    lab=_yaml(
        st.fixed_dictionaries(
            {},
            optional={
                "project": st.one_of(text(), st.just("@admin/lab")),
                "package": st.one_of(
                    _anything(), st.fixed_dictionaries({}, optional={"include": _anything(), "exclude": _anything()})
                ),
            },
        )
    ),
)
def test_cli_config_and_lab_files_load_or_refuse(
    tmp_path_factory: pytest.TempPathFactory, client: str, lab: str
) -> None:
    tmp = tmp_path_factory.mktemp("cli")
    (tmp / "client.yaml").write_text(client)
    codes = []
    try:
        cli_config.load({"STARFORGE_CLIENT_CONFIG": str(tmp / "client.yaml")})
    except CliError as e:
        codes.append(e.exit_code)
    (tmp / "starforge.yaml").write_text(lab)
    try:
        load_settings(tmp / "starforge.yaml")
    except CliError as e:
        codes.append(e.exit_code)
    assert set(codes) <= {2}, codes
