"""Option types shared by several commands."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.output import Format

OutputOpt = Annotated[
    Format | None,
    typer.Option("--output", "-o", help="text (default) or json: machine-readable output on stdout."),
]
