"""Headless Chromium (Debian's /usr/bin/chromium, driven by Playwright) for the web console tests.

No browser is downloaded: Playwright launches the system chromium. If it cannot start, the test
fails with chromium's own output. The console's UI must be built first (`make web`); the tests
fail with that hint otherwise. Screenshots go to test-artifacts/browser/.
"""

from __future__ import annotations

import pathlib
import re
from collections.abc import AsyncIterator

import pytest
from playwright.async_api import Browser, Page, async_playwright

ROOT = pathlib.Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "browser"
CHROMIUM = pathlib.Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="session")
def built_ui() -> pathlib.Path:
    dist = ROOT / "web" / "dist"
    assert (dist / "index.html").is_file(), f"{dist}/index.html is missing: build the console with `make web`"
    return dist


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Browser]:
    assert CHROMIUM.exists(), f"{CHROMIUM} is missing: `make system-deps` installs chromium"
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            await b.close()


class Shots:
    """Numbered screenshots of one test: test-artifacts/browser/<test>/<NN>-<step>.png."""

    def __init__(self, name: str) -> None:
        self.dir = ARTIFACTS / re.sub(r"[^A-Za-z0-9_.-]", "_", name)
        self.dir.mkdir(parents=True, exist_ok=True)
        for old in self.dir.glob("*.png"):
            old.unlink()
        self.n = 0

    async def __call__(self, page: Page, step: str) -> pathlib.Path:
        self.n += 1
        path = self.dir / f"{self.n:02d}-{step}.png"
        await page.screenshot(path=str(path), full_page=True)
        return path


@pytest.fixture
def shots(request: pytest.FixtureRequest) -> Shots:
    return Shots(request.node.name)


@pytest.fixture
async def page(browser: Browser, built_ui: pathlib.Path) -> AsyncIterator[Page]:
    context = await browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(30_000)
    p = await context.new_page()
    errors: list[str] = []
    p.on("pageerror", lambda e: errors.append(str(e)))
    try:
        yield p
    finally:
        await context.close()
    assert not errors, f"uncaught errors in the page: {errors}"
