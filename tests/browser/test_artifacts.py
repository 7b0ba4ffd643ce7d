"""The job page's artifacts in headless Chromium, behind envoy: the out dir's files with size and
sha256, links shown as links without a download, and downloads streamed over grpc-web (the
signed-in token), checked against the sha256 and saved by the browser byte for byte."""

from __future__ import annotations

import hashlib
import json
import pathlib

import pytest
from playwright.async_api import Page, expect
from starforge_api.job.v1 import job_state_pb2 as st

from tests.browser.conftest import Shots
from tests.browser.test_console import WAIT, sign_in
from tests.integration.artifacts_support import FILES, WRITE_ARTIFACTS
from tests.integration.console import console
from tests.ports import free_port

pytestmark = pytest.mark.browser


async def test_job_page_lists_and_downloads_artifacts(page: Page, shots: Shots, tmp_path: pathlib.Path) -> None:
    async with console(tmp_path, ui_listen=f"127.0.0.1:{free_port()}") as c:
        lab = await c.lab("arts", WRITE_ARTIFACTS)
        r = await c.sf_async("-o", "json", "submit", "arts", cwd=lab)
        job_id = json.loads(r.stdout)["job"]["job_id"]
        done = await c.wait(job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=120)
        assert done.state == st.JOB_STATE_SUCCEEDED
        out_dir = c.root / "executor" / "out" / job_id

        await sign_in(page, c)
        await expect(page.locator("#current-user")).to_have_text("admin", timeout=WAIT)
        await page.goto(f"{c.app.ui_url}#/jobs/{job_id}")
        rows = page.locator("#artifacts-table tbody tr")
        await expect(rows).to_have_count(len(FILES) + 1, timeout=WAIT)
        for path in FILES:
            row = page.locator(f'#artifacts-table tr[data-path="{path}"]')
            digest = hashlib.sha256((out_dir / path).read_bytes()).hexdigest()
            await expect(row).to_have_attribute("data-sha256", digest)
        link = page.locator('#artifacts-table tr[data-path="exports/passwd-link"]')
        await expect(link).to_have_attribute("data-kind", "symlink")
        await expect(link).to_contain_text("/etc/passwd")
        await expect(link.locator("button")).to_have_count(0)
        await shots(page, "artifacts")

        for path in ("eval/results.json", "checkpoints/step-2/model.bin"):
            row = page.locator(f'#artifacts-table tr[data-path="{path}"]')
            async with page.expect_download(timeout=WAIT) as info:
                await row.locator("button.download").click()
            saved = tmp_path / pathlib.PurePosixPath(path).name
            await (await info.value).save_as(saved)
            assert saved.read_bytes() == (out_dir / path).read_bytes(), path
            await expect(row.locator(".download-status")).to_have_text("saved", timeout=WAIT)
        assert await page.evaluate("window.__starforge.downloads") == 2
        await shots(page, "downloaded")
