"""Packaging through `sf submit`: content-addressed per file, so an unchanged lab uploads nothing."""

from __future__ import annotations

import pathlib

import httpx

from tests.integration.console import console


async def _uploaded_bytes(c) -> float:  # type: ignore[no-untyped-def]
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"http://127.0.0.1:{c.app.ops.port}/metrics")).text
    line = next(ln for ln in text.splitlines() if ln.startswith("starforge_blob_bytes_uploaded_total "))
    return float(line.split()[1])


async def test_resubmitting_an_unchanged_lab_uploads_zero_bytes(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path, http_listen="127.0.0.1:0") as c:
        data = "x" * 200_000
        lab = await c.lab("exp", files={"data/big.txt": data, "src/model.py": "print('model')\n"})
        before = await _uploaded_bytes(c)
        first = await c.sf_async("submit", "exp", cwd=lab)
        after_first = await _uploaded_bytes(c)
        assert after_first - before >= len(data)
        second = await c.sf_async("submit", "exp", cwd=lab)
        assert await _uploaded_bytes(c) == after_first, "an unchanged lab must upload 0 bytes"
        assert c.app.ctx.store.stats.blobs_written > 0
        assert first.returncode == second.returncode == 0
        # one changed file uploads just that file
        (lab / "src" / "model.py").write_text("print('model v2')\n")
        r = await c.sf_async("submit", "exp", "--allow-dirty", cwd=lab)
        assert 0 < await _uploaded_bytes(c) - after_first < 100
        assert r.returncode == 0
