"""Apply Alembic migrations programmatically (the control plane upgrades its ledger at start).

Migrations after the last release's head (deploy/releases.txt) are expand-only: new tables,
nullable or defaulted columns, indexes, data fixes. A replica of the last release may still serve
from the migrated database during a rolling upgrade; drops, renames, type changes and NOT NULL
without a default wait for a later release (docs/deploy.md,
tests/unit/control/test_migrations_expand_only.py).
"""

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
