"""`common.gc_tuning`: a server's thresholds, start-up's objects frozen, its garbage freed first;
`sf`'s command with the same thresholds. Run in child interpreters, so this test process keeps
CPython's defaults."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

from common.gc_tuning import SERVING_THRESHOLDS

REPO = pathlib.Path(__file__).resolve().parents[2]

PROBE = """
import gc, json, weakref
from common.gc_tuning import tune_for_serving
class Cycle:
    def __init__(self): self.me = self
garbage = weakref.ref(Cycle())  # a cycle: only the collector frees it
before = {"threshold": gc.get_threshold(), "frozen": gc.get_freeze_count()}
tune_for_serving()
left = garbage() is not None
print(json.dumps({"before": before, "threshold": gc.get_threshold(), "frozen": gc.get_freeze_count(), "left": left}))
"""


def test_serving_settings_replace_the_defaults_and_freeze_what_start_up_built() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, check=True)
    got = json.loads(out.stdout)
    assert got["before"] == {"threshold": [700, 10, 10], "frozen": 0}
    assert tuple(got["threshold"]) == SERVING_THRESHOLDS
    assert got["frozen"] > 1000  # the modules' objects, at least
    assert got["left"] is False  # start-up's garbage was collected, not frozen


SF_PROBE = """
import gc, json, sys
from cli import fastpath, main
seen = {}
def run(argv):
    seen["threshold"] = gc.get_threshold()
    seen["frozen"] = gc.get_freeze_count()
    return 0
def exit_now(code):
    print(json.dumps(seen))
    sys.exit(code)
fastpath.run = run
main.exit_now = exit_now
main.main()
"""


def test_sf_runs_its_command_with_the_thresholds_and_nothing_frozen() -> None:
    out = subprocess.run([sys.executable, "-c", SF_PROBE], cwd=REPO, capture_output=True, text=True, check=True)
    got = json.loads(out.stdout)
    assert tuple(got["threshold"]) == SERVING_THRESHOLDS
    assert got["frozen"] == 0  # a command neither collects nor freezes at start
