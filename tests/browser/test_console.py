"""The web console in headless Chromium against a live embedded console behind envoy:
sign in, watch a running job's logs grow and its loss chart update, stop it, see it STOPPED;
a wrong token gets the sign-in error; the job list shows why a queued job waits.
"""

from __future__ import annotations

import asyncio
import json
import pathlib

import pytest
from playwright.async_api import Page, expect
from starforge_api.control.v1 import account_service_pb2 as acct
from starforge_api.control.v1 import account_service_pb2_grpc as acct_grpc
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.job.v1 import job_state_pb2 as st

from control.config import InventoryConfig
from tests.browser.conftest import Shots
from tests.integration.console import Console, console
from tests.ports import free_port

# Each test runs with the console's ledger on SQLite and on PostgreSQL.
pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("ledger")]

# Prints a line and reports a loss every 0.2 s for much longer than the test runs.
TRAIN = """#!/usr/bin/env bash
set -e
python3 -u - <<'PY'
import math, time
import starforge
for step in range(1, 100000):
    loss = 2.0 * math.exp(-step / 40) + 0.1
    print(f"step {step} loss {loss:.4f}", flush=True)
    starforge.report(step=step, loss=loss)
    time.sleep(0.2)
PY
"""
WAIT = 30_000  # ms, for anything the page waits on (the machine may be busy: two shared cores)
expect.set_options(timeout=WAIT)


async def submit(c: Console, lab: pathlib.Path) -> str:
    r = await c.sf_async("-o", "json", "submit", "exp", "--profile", "cpu", cwd=lab)
    doc = json.loads(r.stdout)
    job = doc["job"]
    return str(job.get("job_id") or job["jobId"])


async def sign_in(page: Page, c: Console, token: str | None = None) -> None:
    await page.goto(c.app.ui_url)
    await page.fill("#token", token or c.token)
    await page.click("#sign-in")


async def test_sign_in_follow_a_running_job_and_stop_it(page: Page, shots: Shots, tmp_path: pathlib.Path) -> None:
    # one CPU slot: the first job runs, the second waits for capacity
    inventory = [InventoryConfig(series="cpu", nodes=1, gpus_per_node=0, slots=1)]
    async with console(tmp_path, ui_listen=f"127.0.0.1:{free_port()}", inventory=inventory) as c:
        lab = await c.lab("exp", TRAIN)
        running = await submit(c, lab)
        await c.wait(running, st.JOB_STATE_RUNNING, timeout=60)
        queued = await submit(c, lab)
        job = await c.wait(queued, st.JOB_STATE_QUEUED)
        # admitted, it waits "for the scheduler" until the scheduler's next pass names the reason
        deadline = asyncio.get_running_loop().time() + 30
        while job.wait.reason != st.WAIT_REASON_CAPACITY and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)
            job = await c.get(queued)
        assert job.wait.reason == st.WAIT_REASON_CAPACITY, job.wait

        # a wrong token is refused with the server's sentence
        await sign_in(page, c, "sfp_wrongtoken_" + "x" * 40)
        await expect(page.locator("#signin-error")).to_contain_text("token", timeout=WAIT)
        await shots(page, "wrong-token")

        await page.fill("#token", c.token)
        await page.click("#sign-in")
        await expect(page.locator("#current-user")).to_have_text("admin", timeout=WAIT)

        # the job list: both jobs, the queued one says why it waits and where it stands
        queued_row = page.locator(f'#jobs-table tr[data-job-id="{queued}"]')
        await expect(queued_row).to_have_attribute("data-state", "QUEUED", timeout=WAIT)
        await expect(queued_row.locator(".wait-cell")).to_contain_text("capacity", timeout=WAIT)
        await expect(queued_row.locator(".queue-pos")).to_contain_text("#1")
        await expect(page.locator(f'#jobs-table tr[data-job-id="{running}"]')).to_have_attribute(
            "data-state", "RUNNING"
        )
        await shots(page, "job-list")

        # the state filter narrows the list
        await page.select_option("#filter-state", "QUEUED")
        await expect(page.locator("#jobs-table tbody tr")).to_have_count(1, timeout=WAIT)
        await page.select_option("#filter-state", "")

        # the running job: logs grow, the loss chart updates
        await page.click(f'#jobs-table a[href="#/jobs/{running}"]')
        await expect(page.locator("#job-state")).to_have_attribute("data-state", "RUNNING", timeout=WAIT)
        await page.wait_for_function("() => window.__starforge.logLines >= 5", timeout=WAIT)
        lines = await page.evaluate("window.__starforge.logLines")
        await page.wait_for_function("n => window.__starforge.logLines > n", arg=lines, timeout=WAIT)
        await expect(page.locator("#job-log")).to_contain_text("step ")
        chart = page.locator('.metric-chart[data-metric="loss"]')
        await page.wait_for_function("() => (window.__starforge.charts.loss?.points ?? 0) >= 2", timeout=WAIT)
        points = await page.evaluate("window.__starforge.charts.loss.points")
        await shots(page, "running-job")
        await page.wait_for_function("n => window.__starforge.charts.loss.points > n", arg=points, timeout=WAIT)
        assert int(await chart.get_attribute("data-points") or 0) > points
        await expect(chart.locator("canvas")).to_have_count(1)
        more_lines = await page.evaluate("window.__starforge.logLines")
        assert more_lines > lines
        await shots(page, "logs-and-chart-updated")

        # a dropped stream (envoy restarts) reconnects after the last line shown: no line lost or doubled
        envoy = c.app.envoy
        assert envoy is not None
        await asyncio.to_thread(envoy.stop)
        await expect(page.locator("#log-status")).to_contain_text("reconnecting", timeout=WAIT)
        await shots(page, "stream-dropped")
        await asyncio.to_thread(envoy.start)
        await expect(page.locator("#log-status")).to_have_text("following", timeout=WAIT)
        before = await page.evaluate("window.__starforge.logLines")
        await page.wait_for_function("n => window.__starforge.logLines >= n + 5", arg=before, timeout=WAIT)
        texts = await page.locator("#job-log .log-line.stdout").all_text_contents()
        steps = [int(t.split()[1]) for t in texts if t.startswith("step ")]
        assert steps == list(range(1, len(steps) + 1)), steps
        await expect(page.locator("#job-error")).to_be_empty()

        # buttons follow state and rights: a running job can be stopped and paused, not resumed
        await expect(page.locator("#action-stop")).to_be_enabled()
        await expect(page.locator("#action-resume")).to_be_disabled()
        await expect(page.locator("#action-retry")).to_be_disabled()

        # stop (two clicks: Stop, then Confirm stop)
        await page.click("#action-stop")
        await expect(page.locator("#action-stop")).to_have_text("Confirm stop")
        await shots(page, "confirm-stop")
        await page.click("#action-stop")
        await expect(page.locator("#job-state")).to_have_attribute("data-state", "STOPPED", timeout=WAIT)
        await expect(page.locator("#log-status")).to_contain_text("STOPPED", timeout=WAIT)
        await expect(page.locator("#action-resume")).to_be_enabled()
        await expect(page.locator("#action-stop")).to_be_disabled()
        await shots(page, "stopped")
        assert (await c.get(running)).state == st.JOB_STATE_STOPPED

        # the server's refusal is shown if a button is used anyway (forced through the DOM)
        await page.evaluate("document.querySelector('#action-pause').disabled = false")
        await page.click("#action-pause")
        await expect(page.locator("#action-error")).not_to_be_empty(timeout=WAIT)
        await shots(page, "refusal-shown")

        # the chart zooms: drag across it selects a step range, double-click zooms out
        over = chart.locator(".u-over")
        box = await over.bounding_box()
        assert box is not None
        y = box["y"] + box["height"] / 2
        await page.mouse.move(box["x"] + box["width"] * 0.3, y)
        await page.mouse.down()
        await page.mouse.move(box["x"] + box["width"] * 0.6, y, steps=5)
        await page.mouse.up()
        await expect(chart).to_have_attribute("data-zoomed", "1")
        # zoomed: the x range ends before the last step (late points of the stopped run don't undo the zoom)
        zoomed = "el => Number(el.dataset.xMax) < Number(el.dataset.lastStep)"
        assert await chart.evaluate(zoomed)
        await shots(page, "zoomed")
        await over.dblclick()
        await expect(chart).to_have_attribute("data-zoomed", "0")
        await page.wait_for_function(
            "el => el.dataset.xMax === el.dataset.lastStep", arg=await chart.element_handle(), timeout=WAIT
        )

        # the freed slot runs the queued job; overlay it on this job's chart
        await c.wait(queued, st.JOB_STATE_RUNNING, timeout=60)
        await page.click("#overlay-runs summary")
        await page.check(f'#overlay-runs input[data-overlay="{queued}"]', timeout=WAIT)
        await page.wait_for_function("() => window.__starforge.charts.loss?.series === 2", timeout=WAIT)
        await expect(chart).to_have_attribute("data-series", "2")
        await shots(page, "overlay-runs")
        await page.set_viewport_size({"width": 420, "height": 900})  # a phone: one column
        await shots(page, "narrow")

        await c.jobs.StopJob(ctl.StopJobRequest(job_id=queued), metadata=c.md)


async def test_catalog_users_and_sign_out(page: Page, shots: Shots, tmp_path: pathlib.Path) -> None:
    async with console(tmp_path, ui_listen=f"127.0.0.1:{free_port()}") as c:
        bob = await acct_grpc.AccountServiceStub(c.channel).CreateUser(
            acct.CreateUserRequest(name="bob"), metadata=c.md
        )
        await sign_in(page, c, bob.token)
        await expect(page.locator("#current-user")).to_have_text("bob", timeout=WAIT)
        await expect(page.locator("#filter-everyone")).to_have_count(0)  # not an admin
        await expect(page.locator("#jobs-table")).to_contain_text("No jobs.", timeout=WAIT)
        await shots(page, "no-jobs")

        await page.click('nav a:has-text("Catalog")')
        row = page.locator('#recipes-table tr[data-recipe="trl/kto"]')
        await expect(row).to_be_visible(timeout=WAIT)
        await shots(page, "catalog")
        await row.locator("a").click()
        await expect(page.locator('.recipe[data-recipe="trl/kto"]')).to_be_visible(timeout=WAIT)
        await expect(page.locator("#parameters-table")).to_contain_text("learning_rate")
        await shots(page, "recipe")

        await page.click("#sign-out")
        await expect(page.locator("#token")).to_be_visible(timeout=WAIT)
        assert await page.evaluate("window.localStorage.getItem('starforge.token')") is None
        await page.reload()
        await expect(page.locator("#token")).to_be_visible(timeout=WAIT)
        await shots(page, "signed-out")

        # a failed job: its diagnosis (class, summary, last lines) and Retry
        failed = await c.submit_custom("#!/usr/bin/env bash\necho about to fail\necho boom >&2\nexit 3\n")
        await c.wait(failed.job_id, st.JOB_STATE_FAILED, timeout=60)
        await page.goto(f"{c.app.ui_url}#/jobs/{failed.job_id}")
        await page.fill("#token", c.token)
        await page.click("#sign-in")
        await expect(page.locator("#job-state")).to_have_attribute("data-state", "FAILED", timeout=WAIT)
        diagnosis = page.locator("#job-diagnosis")
        await expect(diagnosis).to_contain_text("user code")
        await expect(diagnosis).to_contain_text("boom")
        await expect(page.locator("#action-retry")).to_be_enabled()
        await expect(page.locator("#action-stop")).to_be_disabled()
        await expect(page.locator('#attempts-table tr[data-attempt="1"]')).to_contain_text("3")
        await shots(page, "failed-job")


async def test_job_page_links_to_the_external_tracker(page: Page, shots: Shots, tmp_path: pathlib.Path) -> None:
    async with console(tmp_path, ui_listen=f"127.0.0.1:{free_port()}") as c:
        lab = await c.lab("exp", "#!/usr/bin/env bash\necho external\n", config={"observability": "external"})
        url = "https://wandb.example.internal/team/project"
        r = await c.sf_async("-o", "json", "submit", "exp", "--observability-url", url, cwd=lab)
        job_id = json.loads(r.stdout)["job"]["job_id"]
        await c.wait(job_id, st.JOB_STATE_SUCCEEDED, timeout=60)
        await sign_in(page, c)
        await expect(page.locator("#current-user")).to_have_text("admin", timeout=WAIT)
        await page.goto(f"{c.app.ui_url}#/jobs/{job_id}")
        link = page.locator("#job-tracker")
        await expect(link).to_have_attribute("href", url, timeout=WAIT)
        await expect(link).to_have_text(url)
        await expect(link).to_have_attribute("rel", "noopener noreferrer")
        await expect(page.locator(".job-header")).to_contain_text("(wandb)")
        await shots(page, "tracker-link")


# 10 metrics of 3,000 steps each, reported as fast as the SDK takes them; m0 spikes once.
MANY = """#!/usr/bin/env bash
set -e
python3 -u - <<'PY'
import starforge
for step in range(1, 3001):
    starforge.report(step=step, **{f"m{k}": (100.0 if k == 0 and step == 1234 else 1.0 / step + k) for k in range(10)})
print("done", flush=True)
PY
"""


async def test_many_points_are_downsampled_drawn_in_view_and_refined_on_zoom(
    page: Page, shots: Shots, tmp_path: pathlib.Path
) -> None:
    async with console(tmp_path, ui_listen=f"127.0.0.1:{free_port()}") as c:
        lab = await c.lab("exp", MANY)
        job_id = await submit(c, lab)
        await c.wait(job_id, st.JOB_STATE_SUCCEEDED, timeout=120)
        await sign_in(page, c)
        await expect(page.locator("#current-user")).to_have_text("admin", timeout=WAIT)
        await page.goto(f"{c.app.ui_url}#/jobs/{job_id}")
        # every series is there up to its last step, cut to at most 1,000 points
        await page.wait_for_function(
            "() => { const c = Object.values(window.__starforge.charts);"
            " return c.length === 10 && c.every(x => x.lastStep === 3000); }",
            timeout=WAIT,
        )
        charts = await page.evaluate("window.__starforge.charts")
        assert all(0 < x["points"] <= 1000 for x in charts.values()), charts
        # only the charts near the viewport are plotted; the last one once it is scrolled to
        first = page.locator('.metric-chart[data-metric="m0"]')
        last = page.locator('.metric-chart[data-metric="m9"]')
        await expect(first).to_have_attribute("data-drawn", "1")
        assert await last.get_attribute("data-drawn") is None
        assert not (await page.evaluate("window.__starforge.charts.m9.drawn"))
        await last.scroll_into_view_if_needed()
        await expect(last).to_have_attribute("data-drawn", "1")
        await shots(page, "many-points-scrolled")
        # zooming into a step range fetches it at full resolution
        await first.scroll_into_view_if_needed()
        over = first.locator(".u-over")
        box = await over.bounding_box()
        assert box is not None
        y = box["y"] + box["height"] / 2
        await page.mouse.move(box["x"] + box["width"] * 0.3, y)
        await page.mouse.down()
        await page.mouse.move(box["x"] + box["width"] * 0.6, y, steps=5)
        await page.mouse.up()
        await expect(first).to_have_attribute("data-zoomed", "1")
        await page.wait_for_function("() => window.__starforge.charts.m0.points > 1000", timeout=WAIT)
        await shots(page, "many-points-zoomed")


async def test_log_view_loads_earlier_lines_back_to_the_first(page: Page, shots: Shots, tmp_path: pathlib.Path) -> None:
    async with console(tmp_path, ui_listen=f"127.0.0.1:{free_port()}") as c:
        lab = await c.lab("exp", '#!/usr/bin/env bash\nfor i in $(seq 1 1200); do echo "line $i"; done\n')
        job_id = await submit(c, lab)
        await c.wait(job_id, st.JOB_STATE_SUCCEEDED, timeout=120)

        # the API: a page of the lines before a cursor, in order (the runner's own lines are there too)
        every = [
            line
            async for r in c.jobs.StreamJobLogs(ctl.StreamJobLogsRequest(job_id=job_id), metadata=c.md)
            for line in r.lines
        ]
        full = [x.text for x in every]
        at = full.index("line 700")
        page_back = [
            line
            async for r in c.jobs.StreamJobLogs(
                ctl.StreamJobLogsRequest(
                    job_id=job_id, before_attempt_number=1, before_offset=every[at].offset, tail_lines=3
                ),
                metadata=c.md,
            )
            for line in r.lines
        ]
        assert [x.text for x in page_back] == ["line 697", "line 698", "line 699"]

        await sign_in(page, c)
        await expect(page.locator("#current-user")).to_have_text("admin", timeout=WAIT)
        await page.goto(f"{c.app.ui_url}#/jobs/{job_id}")
        log = page.locator("#job-log")
        await expect(log).to_have_attribute("data-lines", "500")
        await expect(log.locator(".log-line").first).to_have_text(full[-500])
        earlier = page.locator("#log-earlier")
        await expect(earlier).to_be_visible()
        await earlier.click()
        await expect(log).to_have_attribute("data-lines", "1000")
        await expect(log.locator(".log-line").first).to_have_text(full[-1000])
        assert 1000 < len(full) <= 1500, len(full)  # 1,200 lines and the runner's few
        await earlier.click()
        await expect(log).to_have_attribute("data-lines", str(len(full)))
        await expect(earlier).to_be_hidden()  # the history starts here
        await expect(log.locator(".log-attempt")).to_have_count(1)  # one header, on top, not one per page
        assert await log.locator(".log-line").all_text_contents() == full
        await shots(page, "logs-loaded-back")
