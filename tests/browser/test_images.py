"""The web console shows where a job's image came from: a custom job that named no image runs on
the fleet that declares the host runtime, and the job page says so (docs/images.md)."""

from __future__ import annotations

import json
import pathlib

import pytest
import yaml
from playwright.async_api import Page, expect

from tests.browser.conftest import Shots
from tests.browser.test_console import WAIT, sign_in
from tests.integration.console import console, git
from tests.ports import free_port

pytestmark = pytest.mark.browser


async def test_the_job_page_shows_the_host_runtime_and_its_source(
    page: Page, shots: Shots, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FORGE_IMAGE_CUSTOM", raising=False)
    async with console(
        tmp_path, ui_listen=f"127.0.0.1:{free_port()}", default_images={}, fleet_options={"host_runtime": True}
    ) as c:
        lab = await c.lab("exp", "#!/usr/bin/env bash\necho no image\n")
        cfg_path = lab / "experiments" / "exp" / "config.yaml"
        cfg = yaml.safe_load(cfg_path.read_text())
        cfg.pop("image")
        cfg_path.write_text(yaml.safe_dump(cfg))
        git(lab, "commit", "-qam", "no image")
        r = await c.sf_async("-o", "json", "submit", "exp", cwd=lab)
        job_id = json.loads(r.stdout)["job"]["job_id"]
        await sign_in(page, c)
        await page.goto(f"{c.app.ui_url}#/jobs/{job_id}")
        header = page.locator(".job-header")
        await expect(header).to_contain_text("host (no container: the fleet's own environment)", timeout=WAIT)
        await expect(header).to_contain_text(
            "host runtime: fleet local declares the host runtime (host_runtime: true): no container"
        )
        await expect(header).to_contain_text("1 (runtime custom)")
        await shots(page, "host-runtime-job")
