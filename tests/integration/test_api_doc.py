"""docs/api.md's raw submission example runs as written, with plain grpcio, against a real console."""

from __future__ import annotations

import asyncio
import pathlib
import re
from typing import Any

from starforge_api.job.v1 import job_state_pb2 as st

from tests.integration.console import REPO, console

DOC = REPO / "docs" / "api.md"


def example() -> str:
    text = DOC.read_text()
    section = text[text.index("## Submitting a job without `sf`") :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "docs/api.md lost its Python example"
    return match.group(1)


async def test_the_documented_raw_submission_runs(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path) as c:
        scope: dict[str, Any] = {"ADDRESS": c.address, "TOKEN": c.token, "USER": "admin", "IMAGE": "host"}
        # Blocking grpcio calls, in a thread: the control plane serves from this event loop.
        await asyncio.to_thread(exec, compile(example(), str(DOC), "exec"), scope)
        job = scope["job"]
        assert job.state == st.JOB_STATE_QUEUED and job.job_id
        done = await c.wait(job.job_id, st.JOB_STATE_SUCCEEDED)
        assert done.spec.workspace.digest == scope["manifest"].digest
        assert done.labels["submitted-by"] == "api-doc"
        assert "hello from the API" in "\n".join(await c.logs(job.job_id))
