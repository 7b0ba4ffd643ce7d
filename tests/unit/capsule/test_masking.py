"""The runner masks its job's secret values before echoing or journalling a line."""

from __future__ import annotations

import asyncio
import io
from typing import Any

from capsule.runner.logs import LogForwarder
from capsule.runner.masking import secret_mask


class _Reporter:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, stream: Any, lines: list[str]) -> int:
        self.lines.extend(lines)
        return len(lines)


def test_no_secret_names_means_no_mask() -> None:
    assert secret_mask({"WANDB": "value-1234"}) is None
    assert secret_mask({"FORGE_SECRET_ENV": "WANDB", "WANDB": "ab"}) is None  # too short to mask


def test_mask_replaces_the_named_variables_values_only() -> None:
    mask = secret_mask({"FORGE_SECRET_ENV": "A,B", "A": "alpha-secret", "B": "l1-first\nl2-second", "C": "public"})
    assert mask is not None
    assert mask("a=alpha-secret b=l2-second c=public") == "a=*** b=*** c=public"


async def test_forwarder_masks_echo_and_journal_even_across_reads() -> None:
    reporter = _Reporter()
    echo = io.BytesIO()
    mask = secret_mask({"FORGE_SECRET_ENV": "K", "K": "hunter2-secret"})
    fwd = LogForwarder(reporter, 1, echo, mask=mask)  # type: ignore[arg-type]
    reader = asyncio.StreamReader()
    for part in (b"token=hunter2-", b"secret done\npartial hunter2-secret"):
        reader.feed_data(part)
    reader.feed_eof()
    await fwd.pump(reader)
    assert reporter.lines == ["token=*** done", "partial ***"]
    assert echo.getvalue() == b"token=*** done\npartial ***\n"
    assert b"hunter2" not in echo.getvalue()
