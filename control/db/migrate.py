"""Apply Alembic migrations programmatically (the control plane upgrades its ledger at start)."""

from __future__ import annotations

import pathlib

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine

MIGRATIONS = pathlib.Path(__file__).resolve().parent / "migrations"


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(engine: Engine) -> None:
    """Bring the schema to the newest revision (no-op when it is current)."""
    cfg = alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
