"""Opening a store database: URLs, engines, and the one thread that talks to it.

SQLAlchemy's synchronous engine runs on a small thread pool owned by the store (one thread for
SQLite, whose writers serialize anyway; a few for PostgreSQL), so the event loop never blocks on
the database. SQLite runs in WAL mode and starts every transaction with ``BEGIN IMMEDIATE``:
several processes may share one file, and a transaction that reads then writes must hold the
write lock from its start or two of them could both read the same free episode.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import StaticPool

from envfarm.errors import StoreError

SQLITE_BUSY_TIMEOUT_S = 60


def normalize_url(url: str) -> URL:
    """A SQLAlchemy URL from ``--db``: a URL, or a plain file path meaning a SQLite file."""
    if "://" not in url:
        path = Path(url).expanduser().resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        return make_url(f"sqlite:///{path}")
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise StoreError(f"--db {url!r}: not a database URL ({exc})") from exc
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.drivername.startswith("sqlite") and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    if not parsed.drivername.startswith(("sqlite", "postgresql")):
        raise StoreError(
            f"--db {parsed.render_as_string(hide_password=True)}: unsupported database "
            "(expected sqlite:///FILE or postgresql://USER:PASSWORD@HOST/DB)"
        )
    return parsed


def is_sqlite(url: URL) -> bool:
    return url.drivername.startswith("sqlite")


def open_engine(url: URL) -> Engine:
    if not is_sqlite(url):
        return create_engine(url, pool_pre_ping=True, pool_size=8, max_overflow=8)
    memory = url.database in (None, "", ":memory:")
    options: dict[str, Any] = {"connect_args": {"check_same_thread": False}}
    if memory:
        options["poolclass"] = StaticPool
    engine = create_engine(url, **options)

    @event.listens_for(engine, "connect")
    def _sqlite_connect(dbapi_connection: Any, _record: object) -> None:
        dbapi_connection.isolation_level = None  # transactions are begun below, explicitly
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_S * 1000}")
        if not memory:
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _sqlite_begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


STORE_FILE = "envfarm.db"


def default_url(data_dir: Path) -> str:
    """The embedded store of a data directory (``serve``, ``worker``) or a run's output."""
    return str(data_dir / STORE_FILE)
