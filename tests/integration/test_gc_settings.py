"""A real `starforge-control` process serves with the garbage collector's serving settings
(`common.gc_tuning`): its /metrics reports the thresholds in effect, the frozen start-up and the
collections' pauses."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import time
import urllib.request

import yaml

from common.gc_tuning import SERVING_THRESHOLDS
from control import embedded
from tests.integration.console import REPO
from tests.ports import free_port


def _scrape(url: str, proc: subprocess.Popen[bytes], log: pathlib.Path) -> dict[str, float]:
    """The /metrics samples once the HTTP port answers (names with their labels, as printed)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                text = r.read().decode()
            break
        except OSError:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the control plane's HTTP port did not answer"
            time.sleep(0.1)
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def test_the_control_process_serves_with_the_serving_gc_settings(tmp_path: pathlib.Path) -> None:
    http = f"127.0.0.1:{free_port()}"
    config = tmp_path / "control.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "listen": f"127.0.0.1:{free_port()}",
                "http_listen": http,
                "state_dir": str(tmp_path / "state"),
                "capsule_dir": str(embedded.ensure_capsule()),
                "bootstrap_admin": "admin",
                "hf_precheck": False,
            }
        )
    )
    log = tmp_path / "control.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "control.main", "--config", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
    try:
        # the HTTP port opens just before the process enters serve_until_signal: scrape again
        # for a moment if the first answer came from that gap
        samples = _scrape(f"http://{http}/metrics", proc, log)
        settle = time.monotonic() + 10
        while samples['starforge_gc_threshold{generation="0"}'] == 700 and time.monotonic() < settle:
            time.sleep(0.1)
            samples = _scrape(f"http://{http}/metrics", proc, log)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    thresholds = tuple(int(samples[f'starforge_gc_threshold{{generation="{g}"}}']) for g in range(3))
    assert thresholds == SERVING_THRESHOLDS
    assert samples["starforge_gc_frozen_objects"] > 10_000  # the modules and everything start-up built
    assert samples['python_gc_collections_total{generation="2"}'] >= 1
    # tune_for_serving's own full collection, timed by the pause callback
    assert samples['starforge_gc_pause_seconds_total{generation="2"}'] > 0
    assert 0 < samples['starforge_gc_pause_max_seconds{generation="2"}'] < 60
