"""Lab discovery and starforge.yaml / experiment file checks (all local, exit 2 on problems)."""

from __future__ import annotations

import pathlib
import re

import pytest

from cli import lab as labmod
from cli.errors import EXIT_USAGE, CliError
from tests.unit.cli.helpers import write


def _settings_error(tmp_path: pathlib.Path, text: str) -> CliError:
    path = write(tmp_path / "starforge.yaml", text)
    with pytest.raises(CliError) as info:
        labmod.load_settings(path)
    assert info.value.exit_code == EXIT_USAGE
    return info.value


def test_lab_is_found_by_walking_up(tmp_path: pathlib.Path) -> None:
    write(tmp_path / "starforge.yaml", 'project: "@alice/lab"\n')
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    lab = labmod.find_lab(deep)
    assert lab.root == tmp_path.resolve()
    assert lab.settings.project == "@alice/lab"
    assert lab.settings.include == ()
    assert lab.settings.exclude == ()


def test_nearest_lab_wins(tmp_path: pathlib.Path) -> None:
    write(tmp_path / "starforge.yaml", 'project: "@alice/outer"\n')
    write(tmp_path / "inner" / "starforge.yaml", 'project: "@alice/inner"\n')
    assert labmod.find_lab(tmp_path / "inner").settings.project == "@alice/inner"


def test_no_lab_is_a_usage_error_with_the_fix(tmp_path: pathlib.Path) -> None:
    with pytest.raises(CliError) as info:
        labmod.find_lab(tmp_path)
    assert info.value.exit_code == EXIT_USAGE
    assert "no starforge.yaml" in info.value.message
    assert "sf init" in (info.value.hint or "")


def test_package_globs_are_read(tmp_path: pathlib.Path) -> None:
    path = write(
        tmp_path / "starforge.yaml",
        'project: "@alice/lab"\npackage:\n  include: ["data/*.jsonl"]\n  exclude: ["*.ckpt", "scratch/"]\n',
    )
    settings = labmod.load_settings(path)
    assert settings.include == ("data/*.jsonl",)
    assert settings.exclude == ("*.ckpt", "scratch/")


def test_yaml_syntax_error_names_file_and_line(tmp_path: pathlib.Path) -> None:
    err = _settings_error(tmp_path, 'project: "@alice/lab"\npackage:\n  include: [a, b\n')
    assert f"{tmp_path / 'starforge.yaml'}:" in err.message
    assert "invalid YAML" in err.message


def test_unknown_key_names_line_and_suggests(tmp_path: pathlib.Path) -> None:
    err = _settings_error(tmp_path, 'project: "@alice/lab"\npackges:\n  include: []\n')
    assert err.message.startswith(f"{tmp_path / 'starforge.yaml'}:2:")
    assert "unknown key `packges`" in err.message
    assert "did you mean `package`" in err.message


def test_unknown_package_key(tmp_path: pathlib.Path) -> None:
    err = _settings_error(tmp_path, 'project: "@alice/lab"\npackage:\n  includes: []\n')
    assert ":3:" in err.message
    assert "package.includes" in err.message
    assert "package.include" in err.message


def test_bad_project(tmp_path: pathlib.Path) -> None:
    err = _settings_error(tmp_path, "# comment\nproject: alice/lab\n")
    assert ":2:" in err.message
    assert '"@<user>/<name>"' in err.message


def test_missing_name_and_project(tmp_path: pathlib.Path) -> None:
    err = _settings_error(tmp_path, "package: {}\n")
    assert "`name` is missing" in err.message
    assert "project" in err.message


def test_name_alone_leaves_the_project_to_the_submitter(tmp_path: pathlib.Path) -> None:
    settings = labmod.load_settings(write(tmp_path / "starforge.yaml", "name: my-lab\n"))
    assert (settings.name, settings.project) == ("my-lab", "")


def test_name_and_project_must_agree(tmp_path: pathlib.Path) -> None:
    path = write(tmp_path / "starforge.yaml", 'name: lab\nproject: "@alice/lab"\n')
    assert labmod.load_settings(path).name == "lab"
    err = _settings_error(tmp_path, 'name: other\nproject: "@alice/lab"\n')
    assert ":1:" in err.message and "disagrees" in err.message
    err = _settings_error(tmp_path, "name: Not Valid\n")
    assert "`name` must be" in err.message


def test_empty_file(tmp_path: pathlib.Path) -> None:
    err = _settings_error(tmp_path, "")
    assert "empty starforge.yaml" in err.message


def test_include_must_be_a_list_of_strings(tmp_path: pathlib.Path) -> None:
    err = _settings_error(tmp_path, 'project: "@alice/lab"\npackage:\n  include: data\n')
    assert ":3:" in err.message
    assert "list of glob patterns" in err.message
    err = _settings_error(tmp_path, 'project: "@alice/lab"\npackage:\n  exclude:\n    - ok\n    - 3\n')
    assert ":5:" in err.message


def test_duplicate_key_is_refused(tmp_path: pathlib.Path) -> None:
    err = _settings_error(tmp_path, 'project: "@alice/a"\nproject: "@alice/b"\n')
    assert ":2:" in err.message
    assert "duplicate key `project`" in err.message


def test_unknown_experiment_lists_existing(lab: pathlib.Path) -> None:
    write(lab / "experiments/other/config.yaml", "{}\n")
    found = labmod.find_lab(lab)
    with pytest.raises(CliError) as info:
        found.experiment("demoo")
    err = info.value
    assert err.exit_code == EXIT_USAGE
    assert "unknown experiment `demoo`" in err.message
    assert any("existing experiments: demo, other" in d for d in err.details)
    assert any("did you mean `demo`" in d for d in err.details)


def test_experiment_name_is_checked(lab: pathlib.Path) -> None:
    with pytest.raises(CliError, match=r"invalid experiment name"):
        labmod.find_lab(lab).experiment("../etc")


def test_config_must_be_a_mapping(lab: pathlib.Path) -> None:
    write(lab / "experiments/demo/config.yaml", "- a\n- b\n")
    exp = labmod.find_lab(lab).experiment("demo")
    with pytest.raises(CliError, match=re.escape("config.yaml must be a mapping")):
        exp.load_config()


def test_lock_missing_and_malformed(lab: pathlib.Path) -> None:
    exp = labmod.find_lab(lab).experiment("demo")
    assert exp.load_lock().method == "custom/custom"
    exp.lock_path.write_text("{\n  oops\n}")
    with pytest.raises(CliError, match=r"recipe.lock.json:2: invalid JSON"):
        exp.load_lock()
    exp.lock_path.write_text('{"method": "x/y", "bogus": 1}')
    with pytest.raises(CliError, match=r"not a recipe lock"):
        exp.load_lock()
    exp.lock_path.unlink()
    with pytest.raises(CliError) as info:
        exp.load_lock()
    assert "sf recipe upgrade demo" in (info.value.hint or "")


def test_project_name_for_folder(tmp_path: pathlib.Path) -> None:
    assert labmod.project_name_for(tmp_path / "My Lab!") == "my-lab"
