"""Web console at scale: the job page of a job with 100,000 log lines and 1,000,000 metric points
over 20 series, in headless Chromium.

Ours: the real embedded console with its web UI behind envoy (`sf up` with a fixed port: the UI on
port + 10). The data are written straight into the ledger before the console starts, as the ingest
path stores them (`log_lines` rows and `metric_chunks` rows of 1,000 points of one metric, of one
SUCCEEDED job and its attempt, with sqlite3). Chromium (Debian's, driven by Playwright, as tests/browser does) signs in,
goes to about:blank, then navigates to `#/jobs/<id>`; the figure is the time from that navigation
to the page showing its log tail (`window.__starforge.logLines` > 0), all 20 charts holding their
series up to the last step (`window.__starforge.charts[name]`: points > 0, lastStep; the page asks
for at most 1,000 shape-keeping points per series) and every chart in the viewport plotted (charts
are plotted as they scroll into view, as MLflow's are), polled every animation frame; three loads
(`STARFORGE_BENCH_WEB_NAVIGATIONS`; one in quick mode), each in a browser of its own, and the
figure is the median load's. Memory (the largest of the loads): the
page's JS heap after a forced GC and the DOM node count (CDP `Performance.getMetrics`), and the
renderer's share as `performance.memory.usedJSHeapSize` right after drawing.

Peer: the MLflow UI (`mlflow server`, peers' virtualenv, SQLite store) showing the run page's
model-metrics tab for a run with the same 1,000,000 points (20 metrics x 50,000 steps, written into
its `metrics` and `latest_metrics` tables) and no logs (MLflow has no log view). The figure is the
time until the first screen's chart plots are on the page (`MLFLOW_FIRST_SCREEN`: MLflow plots
only the charts in or near view); the same loads as ours; the server, Chromium and this driver run
together in a loopback-only network namespace. What it draws (how many plots, how many points it
fetched) is recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import pathlib
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from typing import Any

from bench.common import (
    PEER_NOT_RUN,
    PEERS_VENV,
    QUICK,
    Result,
    ensure_peers,
    env_int,
    fresh_dir,
    log,
    median_item,
    netns,
    ratio_lower_better,
    skip_peer,
    stop_pid,
)

LOG_LINES = 2_000 if QUICK else 100_000
SERIES = 20
STEPS = 500 if QUICK else 50_000  # per series: 20 x 50,000 = 1,000,000 points
CHUNK = 1_000  # points per metric_chunks row (one ingest batch of one metric)
# page loads per side, each in a browser of its own: the figure is the median one (one load moved
# between 0.67 and 1.22 s on one machine within minutes)
NAVIGATIONS = 1 if QUICK else env_int("STARFORGE_BENCH_WEB_NAVIGATIONS", 3, minimum=1)
CHROMIUM = pathlib.Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--enable-precise-memory-info",
]
DRAW_TIMEOUT_S = 180.0
MLFLOW_FIRST_SCREEN = 6  # chart plots MLflow 3.17 shows on the first 1400x1000 screen


def free_port_pair() -> int:
    """A port p with p and p + 10 both free (the console and its UI)."""
    for _ in range(100):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port: int = a.getsockname()[1]
            if port + 10 > 65535:
                continue
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", port + 10))
                except OSError:
                    continue
            return port
    raise RuntimeError("no free port pair")


def make_job(state_dir: pathlib.Path, owner: str) -> str:
    """One SUCCEEDED job with LOG_LINES log lines and SERIES x STEPS metric points, written as the
    ingest path stores them; the console's admin token is written as `sf up` does."""
    from common import ids
    from control import auth
    from control.db import migrate
    from control.db import models as m
    from control.db.engine import Database
    from control.ledger import state_machine as sm

    db = Database(f"sqlite:///{state_dir / 'ledger.db'}")
    migrate.upgrade(db.engine)
    now = time.time()

    def create(s: Any) -> str:
        auth.create_user(s, owner, admin=True)
        admin, _ = auth.issue_token(s, owner, "pat", name="bootstrap")
        (state_dir / "admin-token").write_text(admin + "\n")
        job_id = ids.new_job_id()
        s.add(
            m.Job(
                id=job_id, owner=owner, project=f"@{owner}/lab", experiment="exp", method="custom/custom",
                state=sm.SUCCEEDED, spec=b"", pools=b"", created_at=now - 3600, updated_at=now, attempts_count=1,
            )
        )  # fmt: skip
        s.add(
            m.Attempt(
                id=ids.attempt_id(job_id, 1), job_id=job_id, number=1, state=sm.SUCCEEDED, fleet="local",
                created_at=now - 3600, ended_at=now, cleaned_at=now,
            )
        )  # fmt: skip
        return job_id

    try:
        job_id = db.run_sync(create)
    finally:
        db.close()
    conn = sqlite3.connect(state_dir / "ledger.db")
    try:
        t0 = now - 3600
        conn.executemany(
            "INSERT INTO log_lines (job_id, attempt_number, offset, stream, at, text) VALUES (?, 1, ?, 1, ?, ?)",
            (
                (job_id, i, t0 + i * 0.01, f"step {i} loss {2.0 / (1 + i * 0.001):.6f} lr 3e-4 tokens/s 51234.5")
                for i in range(1, LOG_LINES + 1)
            ),
        )
        # as ingest stores them: one metric_chunks row per metric name per batch (CHUNK steps each)
        from control.telemetry import metrics

        for k in range(SERIES):
            for first in range(1, STEPS + 1, CHUNK):
                steps = list(range(first, min(first + CHUNK, STEPS + 1)))
                cols = metrics.Columns()
                cols.add(
                    f"train/metric_{k:02d}",
                    steps,
                    [(k + 1) / (1 + step * 0.001) for step in steps],
                    [t0 + step * 0.05 for step in steps],
                )
                ((name, [(st, vals, times)]),) = cols.by_name.items()  # one part: packed values, times
                conn.execute(
                    "INSERT INTO metric_chunks (job_id, attempt_number, name, first_step, last_step, points,"
                    " step_data, value_data, time_data) VALUES (?, 1, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        job_id, name, st[0], st[-1], len(st), metrics._step_data(st, st[0], st[-1]),
                        vals, times,
                    ),
                )  # fmt: skip
        conn.commit()
    finally:
        conn.close()
    return job_id


async def _browser_measure(sign_in: Any, url: str, drawn_js: str, state_js: str) -> dict[str, Any]:
    """Chromium: `sign_in(page)`, about:blank, then navigate to `url` and wait until `drawn_js` holds."""
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            context = await browser.new_context(viewport={"width": 1400, "height": 1000})
            context.set_default_timeout(DRAW_TIMEOUT_S * 1000)
            page = await context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)[:300]))
            await sign_in(page)
            await page.goto("about:blank")
            cdp = await context.new_cdp_session(page)
            await cdp.send("Performance.enable")
            t0 = time.monotonic()
            await page.goto(url)
            drawn = True
            try:
                await page.wait_for_function(drawn_js, polling="raf", timeout=DRAW_TIMEOUT_S * 1000)
            except Exception as exc:  # what it does instead is the finding
                drawn = False
                errors.append(f"not drawn within {DRAW_TIMEOUT_S:.0f} s: {type(exc).__name__}")
            took = time.monotonic() - t0
            heap_now = await page.evaluate("performance.memory ? performance.memory.usedJSHeapSize : 0")
            state = await page.evaluate(state_js)
            await cdp.send("HeapProfiler.collectGarbage")
            metrics = {m["name"]: m["value"] for m in (await cdp.send("Performance.getMetrics"))["metrics"]}
            shot = pathlib.Path(os.environ.get("STARFORGE_BENCH_SHOT", "/dev/null"))
            if shot.name != "null":
                await page.screenshot(path=str(shot), full_page=False)
            return {
                "seconds": took,
                "drawn": drawn,
                "js_heap_mib_after_draw": heap_now / 2**20,
                "js_heap_mib_after_gc": metrics.get("JSHeapUsedSize", 0) / 2**20,
                "js_heap_total_mib": metrics.get("JSHeapTotalSize", 0) / 2**20,
                "dom_nodes": metrics.get("Nodes", 0),
                "state": state,
                "errors": errors[:5],
            }
        finally:
            await browser.close()


async def _navigations(sign_in: Any, url: str, drawn_js: str, state_js: str) -> dict[str, Any]:
    """NAVIGATIONS loads of `url` (`_browser_measure` each): the median load's figures with every
    load's time beside them; drawn only when every load drew; the largest JS heap of them."""
    runs = [await _browser_measure(sign_in, url, drawn_js, state_js) for _ in range(NAVIGATIONS)]
    out = dict(median_item(runs, lambda r: float(r["seconds"])))
    out["seconds_runs"] = [round(float(r["seconds"]), 3) for r in runs]
    out["drawn"] = all(r["drawn"] for r in runs)
    for key in ("js_heap_mib_after_draw", "js_heap_mib_after_gc"):
        out[key] = max(float(r[key]) for r in runs)
    return out


def measure_ours() -> dict[str, Any]:
    from bench.console import running_console

    work = fresh_dir("web-scale")
    state = work / "console"
    state.mkdir()
    t0 = time.monotonic()
    job_id = make_job(state, "root")
    load_s = time.monotonic() - t0
    log(f"web: {LOG_LINES:,} lines and {SERIES * STEPS:,} points written in {load_s:.0f} s")
    port = free_port_pair()
    with running_console(state, listen=f"127.0.0.1:{port}") as console:
        if not console.ui:
            raise RuntimeError("the console serves no web UI: build it first (`make web`)")

        async def sign_in(page: Any) -> None:
            await page.goto(console.ui)
            await page.fill("#token", console.token)
            await page.click("#sign-in")
            await page.wait_for_selector("#current-user")

        drawn = (
            "() => { const s = window.__starforge; if (!s || s.logLines < 1) return false;"
            f" const c = Object.values(s.charts); if (c.length < {SERIES}) return false;"
            f" if (!c.every(x => x.points > 0 && x.lastStep >= {STEPS}))"
            " return false; const seen = [...document.querySelectorAll('.metric-chart')].filter(e => {"
            " const r = e.getBoundingClientRect(); return r.bottom > 0 && r.top < innerHeight; });"
            " return seen.length > 0 && seen.every(e => e.dataset.drawn === '1'); }"
        )
        state_js = (
            "() => ({logLines: window.__starforge.logLines, charts: Object.keys(window.__starforge.charts).length,"
            " points: Object.values(window.__starforge.charts).reduce((a, c) => a + c.points, 0),"
            " drawn: Object.values(window.__starforge.charts).filter(c => c.drawn).length})"
        )
        os.environ["STARFORGE_BENCH_SHOT"] = str(work / "job-page.png")
        out = asyncio.run(_navigations(sign_in, f"{console.ui}#/jobs/{job_id}", drawn, state_js))
        out["console_memory"] = console.memory()
    out["data_load_s"] = load_s
    return out


# -- the MLflow peer (runs inside a loopback-only netns: server, Chromium and this driver) --------


def _mlflow_seed(db: pathlib.Path, run_id: str) -> None:
    conn = sqlite3.connect(db)
    try:
        t0 = int((time.time() - 3600) * 1000)
        rows = [
            (f"train/metric_{k:02d}", (k + 1) / (1 + step * 0.001), t0 + step * 50, run_id, step, 0)
            for k in range(SERIES)
            for step in range(1, STEPS + 1)
        ]
        conn.executemany(
            "INSERT INTO metrics (key, value, timestamp, run_uuid, step, is_nan) VALUES (?, ?, ?, ?, ?, ?)", rows
        )
        conn.executemany(
            "INSERT INTO latest_metrics (key, value, timestamp, step, is_nan, run_uuid) VALUES (?, ?, ?, ?, ?, ?)",
            [(r[0], r[1], r[2], r[4], r[5], r[3]) for r in rows if r[4] == STEPS],
        )
        conn.commit()
    finally:
        conn.close()


def _api(url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        doc: dict[str, Any] = json.loads(r.read())
        return doc


def mlflow_peer_main(work: pathlib.Path) -> dict[str, Any]:
    """Inside the netns: start `mlflow server`, seed one run, measure its page in Chromium."""
    subprocess.run(["ip", "link", "set", "lo", "up"], check=False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    db = work / "mlflow.db"
    cmd = [
        str(PEERS_VENV / "bin" / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port),
        "--backend-store-uri", f"sqlite:///{db}", "--default-artifact-root", str(work / "artifacts"),
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    env.update(MLFLOW_ENABLE_TELEMETRY="false", DO_NOT_TRACK="1")
    logf = (work / "mlflow-server.log").open("ab")
    proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True, cwd=work, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            with contextlib.suppress(OSError), urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("mlflow server did not start: " + (work / "mlflow-server.log").read_text()[-2000:])
            time.sleep(0.3)
        run = _api(url, "/api/2.0/mlflow/runs/create", {"experiment_id": "0", "start_time": int(time.time() * 1000)})
        run_id = run["run"]["info"]["run_id"]
        _api(url, "/api/2.0/mlflow/runs/update", {"run_id": run_id, "status": "FINISHED"})
        t0 = time.monotonic()
        _mlflow_seed(db, run_id)
        seed_s = time.monotonic() - t0

        async def no_sign_in(page: Any) -> None:
            await page.goto(url + "/")

        # MLflow draws each metric's chart as a plotly plot, lazily: only the cards in (or near) the
        # viewport get one (9 of 20 at 1400x1000), each from 320 sampled points per series. Drawn
        # here means: the first screen's plots are there (all 20 are never drawn without scrolling).
        drawn = f"() => document.querySelectorAll('.js-plotly-plot').length >= {MLFLOW_FIRST_SCREEN}"
        state_js = "() => ({plots: document.querySelectorAll('.js-plotly-plot').length})"
        os.environ["STARFORGE_BENCH_SHOT"] = str(work / "mlflow-run-page.png")
        page_url = f"{url}/#/experiments/0/runs/{run_id}/model-metrics"
        out = asyncio.run(_navigations(no_sign_in, page_url, drawn, state_js))
        out["seed_s"] = seed_s
        out["mlflow_version"] = subprocess.run(
            [str(PEERS_VENV / "bin" / "python"), "-c", "import mlflow; print(mlflow.__version__)"],
            capture_output=True, text=True, check=False, env=env,
        ).stdout.strip()  # fmt: skip
        server_log = (work / "mlflow-server.log").read_text(errors="replace")
        out["history_requests"] = server_log.count("get-history")
        return out
    finally:
        stop_pid(proc, 10)


def measure_mlflow() -> dict[str, Any]:
    ensure_peers()
    work = fresh_dir("web-mlflow")
    with netns() as ns:
        cmd = ["ip", "netns", "exec", ns, sys.executable, "-m", "bench.web_scale", "--mlflow-peer", str(work)]
        r = subprocess.run(
            cmd, capture_output=True, text=True, timeout=900, check=False, cwd=pathlib.Path(__file__).parents[1]
        )
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        raise RuntimeError(f"the MLflow UI peer failed (exit {r.returncode}): {(r.stdout + r.stderr)[-2000:]}")
    doc: dict[str, Any] = json.loads(lines[-1])
    return doc


def run() -> list[Result]:
    ours = measure_ours()
    log(f"web: drawn={ours['drawn']} in {ours['seconds']:.2f} s, JS heap {ours['js_heap_mib_after_draw']:.0f} MiB")
    mlflow: dict[str, Any] | None = None
    if not skip_peer("web"):
        mlflow = measure_mlflow()
        log(f"web: MLflow UI drawn={mlflow['drawn']} in {mlflow['seconds']:.2f} s ({mlflow['state']})")
    if not ours["drawn"]:
        raise RuntimeError(f"the job page did not draw its logs and charts: {ours['state']} {ours['errors']}")
    load = f"{LOG_LINES:,} log lines, {SERIES * STEPS:,} points / {SERIES} series"
    peer_name = PEER_NOT_RUN
    if mlflow:
        drawn = "first screen drawn" if mlflow["drawn"] else f"NOT drawn: {mlflow['state']}"
        peer_name = (
            f"MLflow {mlflow.get('mlflow_version', '')} UI run page, model metrics ({drawn}; it draws only "
            "the charts in view, from 320 sampled points per series)"
        )
    heap = max(ours["js_heap_mib_after_draw"], ours["js_heap_mib_after_gc"])
    peer_heap = max(mlflow["js_heap_mib_after_draw"], mlflow["js_heap_mib_after_gc"]) if mlflow else None
    return [
        Result(
            name="web-job-page",
            metric=f"job page, navigation -> logs and charts drawn, {load}",
            figure=ours["seconds"],
            unit="s",
            peer=peer_name,
            peer_figure=mlflow["seconds"] if mlflow else None,
            ratio=ratio_lower_better(ours["seconds"], mlflow["seconds"] if mlflow else None),
            ratio_note="MLflow / ours",
            target="<= 1 s",
            met=ours["seconds"] <= 1.0,
            command="python -m bench web",
            details={"ours": ours, "mlflow": mlflow},
        ),
        Result(
            name="web-job-page-memory",
            metric=f"job page JS heap, {load}",
            figure=heap,
            unit="MiB",
            peer=peer_name,
            peer_figure=peer_heap,
            ratio=ratio_lower_better(heap, peer_heap),
            ratio_note="MLflow / ours",
            target="<= 200 MB",
            met=heap * 2**20 <= 200e6,
            command="python -m bench web",
            details={},
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.web_scale")
    p.add_argument("--mlflow-peer", type=pathlib.Path, required=True, metavar="WORK")
    args = p.parse_args(argv)
    print(json.dumps(mlflow_peer_main(args.mlflow_peer)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
