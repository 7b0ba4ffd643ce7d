"""The pre-forked runner's precompiled bootstrap program (capsule/runner/zygote.py).

The zygote compiles the program of the executor's own bootstrap.sh once; a forked attempt whose
bootstrap.sh holds that very program runs the compiled code, and any other program is compiled
from the attempt's own file: what runs is always what the attempt's capsule says.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from capsule.runner import zygote

BOOTSTRAP = pathlib.Path(__file__).resolve().parents[3] / "capsule" / "bootstrap.sh"


@pytest.fixture(autouse=True)
def _nothing_compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zygote, "_COMPILED", {})


def _run(code: Any) -> dict[str, Any]:
    """The program's names, as a forked runner executes it (another __name__: no main)."""
    names: dict[str, Any] = {"__name__": "starforge_bootstrap"}
    exec(code, names)
    return names


def test_the_same_program_runs_the_code_compiled_once(tmp_path: pathlib.Path) -> None:
    attempt = tmp_path / "bootstrap.sh"
    attempt.write_bytes(BOOTSTRAP.read_bytes())
    zygote.compile_bootstrap(str(BOOTSTRAP))
    [compiled] = zygote._COMPILED.values()
    code = zygote.bootstrap_code(str(attempt))
    assert code is compiled
    assert callable(_run(code)["checked_runner"])


def test_another_program_is_compiled_from_the_attempts_own_file(tmp_path: pathlib.Path) -> None:
    zygote.compile_bootstrap(str(BOOTSTRAP))
    text = BOOTSTRAP.read_text()
    assert "MAX_REPORTED = 20\n" in text
    attempt = tmp_path / "bootstrap.sh"
    attempt.write_text(text.replace("MAX_REPORTED = 20\n", "MAX_REPORTED = 21\n"))
    code = zygote.bootstrap_code(str(attempt))
    [compiled] = zygote._COMPILED.values()
    assert code is not compiled
    assert code.co_filename == str(attempt)
    assert _run(code)["MAX_REPORTED"] == 21


def test_without_a_compiled_program_every_fork_compiles_its_own(tmp_path: pathlib.Path) -> None:
    attempt = tmp_path / "bootstrap.sh"
    attempt.write_bytes(BOOTSTRAP.read_bytes())
    code = zygote.bootstrap_code(str(attempt))
    assert code.co_filename == str(attempt)
    assert callable(_run(code)["shared_venv"])


@pytest.mark.parametrize("content", [None, "#!/bin/sh\necho no program here\n", "BOOT='\nif (\n'\n"])
def test_a_bootstrap_it_cannot_compile_leaves_nothing_compiled(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], content: str | None
) -> None:
    path = tmp_path / "bootstrap.sh"
    if content is not None:
        path.write_text(content)
    zygote.compile_bootstrap(str(path))
    assert zygote._COMPILED == {}
    assert "starforge zygote: no precompiled bootstrap program" in capsys.readouterr().err
