"""The ledger database: SQLAlchemy 2 models, engine set-up, Alembic migrations."""
