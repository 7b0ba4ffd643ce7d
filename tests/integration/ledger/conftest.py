from tests.db import db, db_url, pg_url  # noqa: F401 - fixtures
