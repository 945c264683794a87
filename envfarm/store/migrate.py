"""Schema migrations: every store is brought to the newest Alembic revision when opened."""

from __future__ import annotations

import threading
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import func, select
from sqlalchemy.engine import Connection, Engine

MIGRATIONS = Path(__file__).parent / "migrations"
MIGRATION_LOCK_KEY = 0x656E7666  # "envf"
_MIGRATING = threading.Lock()


def alembic_config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def upgrade(engine: Engine) -> None:
    """Bring the database to the newest revision (a no-op when it is there already).

    Serialized: Alembic's context is process-global (one thread at a time), and controllers
    starting together on a fresh PostgreSQL take an advisory lock so one of them migrates."""
    if current_revision(engine) == head_revision():
        return
    with _MIGRATING, engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(select(func.pg_advisory_xact_lock(MIGRATION_LOCK_KEY)))
        if MigrationContext.configure(connection).get_current_revision() == head_revision():
            return
        command.upgrade(alembic_config(connection), "head")
