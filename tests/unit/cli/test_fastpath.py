"""The fast path of the hot read commands (`cli.fastpath`) against the full typer tree (`cli.app`).

Its option tables must name the options `cli.commands.job` and the root callback define, with the
same defaults, and every command line it accepts must reach the command bodies
(`cli.commands.job_read`) with exactly the values the full tree passes them. Lines it declines run
through the full tree, so help and usage errors have one source.
"""

from __future__ import annotations

import enum
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cli import fastpath
from cli.app import app
from cli.commands import job_read
from cli.context import AppState

runner = CliRunner()


def _full_tree_params(path: tuple[str, ...]) -> dict[str, Any]:
    """The click parameters of `sf <path>` in the full tree, by name."""
    cmd: Any = typer.main.get_command(app)
    for name in path:
        cmd = cmd.get_command(None, name) if hasattr(cmd, "get_command") else None
        assert cmd is not None, path
    return {p.name: p for p in cmd.params}


def _described(p: Any) -> tuple[Any, ...]:
    """What the fast path must match of one click parameter: names, kind, default, lower bound."""
    info = p.type_descriptor.parameter_info
    low = getattr(info, "min", None)
    return (
        p.param_type_name,
        tuple(p.opts),
        tuple(p.secondary_opts),
        bool(getattr(p, "is_flag", False)),
        bool(getattr(p, "multiple", False)),
        p.default,
        low or 0,
    )


def _fast_described(opt: fastpath.Opt) -> tuple[Any, ...]:
    return (
        "option",
        opt.names,
        opt.off,
        opt.kind is fastpath.Kind.FLAG,
        opt.kind is fastpath.Kind.MULTI,
        opt.default,
        opt.minimum,
    )


@pytest.mark.parametrize("path", sorted(fastpath.COMMANDS))
def test_each_fast_command_names_the_options_of_the_full_tree(path: tuple[str, ...]) -> None:
    command = fastpath.COMMANDS[path]
    full = _full_tree_params(path)
    fast = {o.dest: _fast_described(o) for o in command.options}
    if command.argument is not None:
        fast[command.argument] = ("argument", (command.argument,), (), False, False, command.argument_default, 0)
    assert {n: _described(p) for n, p in full.items()} == fast


def test_the_root_options_are_those_of_the_full_tree() -> None:
    root: Any = typer.main.get_command(app)
    full = {p.name: _described(p) for p in root.params if p.name != "version"}
    assert full == {o.dest: _fast_described(o) for o in fastpath.ROOT_OPTIONS}
    assert [p.opts for p in root.params if p.name == "version"] == [["--version"]]


Call = tuple[str, str | None, Any, dict[str, Any]]


def _normal(value: Any) -> Any:
    """Tuples from click as lists, empty repeatable options as None, enums as their value."""
    if isinstance(value, tuple | list):
        return list(value) or None
    if isinstance(value, enum.Enum):
        return value.value
    return value


def _record(m: pytest.MonkeyPatch, seen: list[Call]) -> None:
    """The command bodies record what they were called with in `seen` (both paths call them) and
    succeed."""

    def recorder(name: str) -> Any:
        def body(st: AppState, output: Any, /, *args: Any, **kwargs: Any) -> int:
            params = {k: _normal(v) for k, v in kwargs.items()}
            params.update({f"arg{i}": v for i, v in enumerate(args)})
            seen.append((name, st.console_flag, (_normal(st.fmt), _normal(output)), params))
            return 0

        return body

    for name in ("job_ls", "job_status", "job_logs"):
        m.setattr(job_read, name, recorder(name))


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Call]]:
    seen: list[Call] = []
    _record(monkeypatch, seen)
    yield seen


def _both(argv: list[str], calls: list[Call]) -> tuple[Call, Call] | None:
    """The body call of the fast path and of the full tree for `argv` (None: the fast path declines)."""
    code = fastpath.run(argv)
    if code is None:
        return None
    assert code == 0 and len(calls) == 1, (argv, calls)
    result = runner.invoke(app, argv)
    assert result.exit_code == 0, (argv, result.output)
    assert len(calls) == 2, (argv, calls)
    fast, full = calls
    calls.clear()
    return fast, full


ACCEPTED = [
    ["job", "ls"],
    ["job", "ls", "-a", "--state", "queued", "--state", "running,failed", "-n", "7"],
    ["job", "ls", "--limit=3", "--project", "@alice/lab", "--experiment=exp", "-l", "team=rl", "--label", "a=b"],
    ["--console", "10.0.0.5:7070", "-o", "json", "job", "ls", "-o", "text"],
    ["--output=json", "job", "ls", "--all", "--state=", "--project="],
    ["job", "status"],
    ["job", "status", "j0abc123"],
    ["job", "status", "-o", "json", "latest"],
    ["job", "status", "j0abc123", "--output", "json"],
    ["job", "logs"],
    ["job", "logs", "j1", "--no-follow", "-n", "0"],
    ["job", "logs", "-F", "-f", "--lines", "12", "j1"],
    ["job", "logs", "j1", "--follow", "--no-follow", "--lines=5"],
]

DECLINED = [
    [],
    ["--version", "job", "ls"],
    ["job"],
    ["job", "ls", "--help"],
    ["-h", "job", "ls"],
    ["job", "ls", "--bogus"],
    ["job", "ls", "-n", "0"],
    ["job", "ls", "-n5"],
    ["job", "ls", "-an", "5"],
    ["job", "ls", "--limit", "05"],
    ["job", "ls", "--all=yes"],
    ["job", "ls", "extra"],
    ["job", "ls", "--project"],
    ["job", "ls", "--project", "-x"],
    ["job", "ls", "--"],
    ["-o", "JSON", "job", "ls"],
    ["job", "status", "a", "b"],
    ["job", "status", "-"],
    ["job", "status", "\udcff"],
    ["job", "stop", "j1"],
    ["submit"],
    ["submit", "exp", "--priority", "-5"],
    ["submit", "exp", "--help"],
    ["submit", "a", "b"],
]


@pytest.mark.parametrize("argv", ACCEPTED)
def test_accepted_lines_reach_the_bodies_as_through_the_full_tree(argv: list[str], calls: list[Call]) -> None:
    both = _both(argv, calls)
    assert both is not None, f"the fast path declined {argv}"
    assert both[0] == both[1]


@pytest.mark.parametrize("argv", DECLINED)
def test_lines_the_fast_path_is_unsure_of_go_to_the_full_tree(argv: list[str]) -> None:
    assert fastpath.parse(argv) is None


TOKENS = [
    "-a", "--all", "--all=1", "--state", "--state=queued", "queued", "running", "bogus", "--project", "--project=",
    "@a/b", "--experiment", "exp", "--limit", "--limit=2", "-n", "0", "1", "05", "1000000000", "-l", "--label",
    "k=v", "=", "-o", "--output", "--output=json", "json", "text", "JSON", "--console", "h:1", "--follow",
    "--no-follow", "-f", "-F", "--lines", "--lines=0", "j1", "latest", "--", "-", "-x", "-h", "--help", "-n5",
]  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(
    root=st.lists(
        st.sampled_from([("--console", "h:1"), ("-o", "json"), ("-o", "text"), ("--output=text",)]), max_size=2
    ),
    command=st.sampled_from(["ls", "status", "logs"]),
    rest=st.lists(st.sampled_from(TOKENS) | st.text(max_size=12), max_size=6),
)
def test_whatever_the_fast_path_accepts_parses_as_the_full_tree(
    root: list[tuple[str, ...]], command: str, rest: list[str]
) -> None:
    with pytest.MonkeyPatch.context() as m:
        seen: list[Call] = []
        _record(m, seen)
        both = _both([*(a for pair in root for a in pair), "job", command, *rest], seen)
        if both is not None:
            assert both[0] == both[1]


def test_version_prints_what_the_full_tree_prints(capsys: pytest.CaptureFixture[str]) -> None:
    assert fastpath.run(["--version"]) == 0
    fast = capsys.readouterr().out
    assert fast == runner.invoke(app, ["--version"]).stdout
    assert fast.startswith("sf ")


def test_the_hot_commands_load_neither_typer_nor_pydantic(lab: pathlib.Path) -> None:
    """Start-up time (bench `cli`): through the console script's `main`, `sf --version` loads no
    gRPC, protobuf or rich either, `sf -o json job ls` no rich, and `sf submit` of a lab (packed,
    then refused at the console it cannot reach) neither typer nor pydantic."""
    import os
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "import cli.main\n"
        "from cli.main import main\n"
        "def exit_with(code):\n"
        "    raise SystemExit(code)\n"
        "cli.main.exit_now = exit_with  # exit_now would end the process before the print below\n"
        "sys.argv = ['sf', *sys.argv[1:]]\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(' '.join(sorted(m.split('.')[0] for m in sys.modules)), file=sys.stderr)\n"
    )
    env = {
        **os.environ,
        "STARFORGE_CONSOLE": "127.0.0.1:1",
        "STARFORGE_TOKEN": "t",
        "STARFORGE_CLIENT_CONFIG": "/nonexistent",
    }

    def loaded(*args: str, cwd: pathlib.Path | None = None) -> set[str]:
        r = subprocess.run(
            [sys.executable, "-c", probe, *args], capture_output=True, text=True, env=env, check=False, cwd=cwd
        )
        return set(r.stderr.split("\n")[-2].split())

    version = loaded("--version")
    assert not version & {"typer", "click", "pydantic", "grpc", "google", "rich", "yaml"}, version
    ls = loaded("-o", "json", "job", "ls")  # cannot connect (exit 5): the imports up to the call, a JSON error
    assert "grpc" in ls
    assert not ls & {"typer", "click", "pydantic", "rich", "yaml"}, ls
    submit = loaded("-o", "json", "submit", "demo", cwd=lab)
    assert {"grpc", "cli"} <= submit  # it got as far as the console
    assert not submit & {"typer", "click", "pydantic"}, submit


SUBMIT_ACCEPTED = [
    ["submit", "exp"],
    ["submit", "exp", "-o", "json"],
    ["-o", "json", "--console", "h:1", "submit", "--output=text", "exp"],
    ["submit", "exp", "-p", "h200:8", "--set", "a.b=1", "-s", "c=2", "--model", "org/m", "--train-data", "d"],
    ["submit", "--validation-data", "v", "--train-dataset", "o/n@1", "--image", "img", "exp", "--framework-version=1"],
    ["submit", "exp", "--upgrade-recipe", "--observability-url", "http://w", "--observability-tool", "wandb"],
    ["submit", "exp", "--then", "eval", "--retries", "0", "--priority", "7", "--queue", "q", "--fleet", "f"],
    ["submit", "exp", "--label", "a=b", "--env", "X=1", "--secret", "S=ENV", "--allow-dirty", "--no-validate"],
    ["submit", "exp", "--dry-run", "-f", "--follow"],
]


@pytest.mark.parametrize("argv", SUBMIT_ACCEPTED)
def test_submit_lines_reach_the_submit_flow_as_through_the_full_tree(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from cli.commands import submit

    seen: list[tuple[Any, ...]] = []

    def flow(st: AppState, opts: Any, out: Any) -> int:
        seen.append((st.console_flag, _normal(st.fmt), out.json, opts))
        return 0

    monkeypatch.setattr(submit, "submit_experiment", flow)
    assert fastpath.run(argv) == 0, f"the fast path declined {argv}"
    result = runner.invoke(app, argv)
    assert result.exit_code == 0, (argv, result.output)
    assert len(seen) == 2 and seen[0] == seen[1], seen
