"""Opening a store database: URLs, engines, and the one thread that talks to it.

SQLAlchemy's synchronous engine runs on a small thread pool owned by the store (one thread for
SQLite, whose writers serialize anyway; a few for PostgreSQL), so the event loop never blocks on
the database. SQLite runs in WAL mode and starts every transaction with ``BEGIN IMMEDIATE``:
several processes may share one file, and a transaction that reads then writes must hold the
write lock from its start or two of them could both read the same free episode.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, OperationalError
from sqlalchemy.pool import StaticPool

from envfarm.errors import StoreError

SQLITE_BUSY_TIMEOUT_S = 60
SERVER_WAIT_S = 60.0
"""How long opening a store waits for a database server that refuses connections."""
_NOT_YET = (
    "connection refused",
    "the database system is starting up",
    "the database system is shutting down",
    "the database system is in recovery mode",
    "no such file or directory",  # a Unix socket not created yet
    # a Kubernetes Service without a ready pod behind it (a headless one has no address yet)
    "temporary failure in name resolution",
)
"""What a server not taking connections yet answers (connection errors carry no SQLSTATE)."""

log = logging.getLogger(__name__)


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


def wait_for_server(engine: Engine, label: str, wait_s: float = SERVER_WAIT_S) -> None:
    """Connect once, retrying while the server is not taking connections: a worker may start
    while PostgreSQL starts or restarts. Any other refusal (a password, a missing database)
    raises at once, and a server still away after ``wait_s`` raises its last refusal."""
    deadline = time.monotonic() + wait_s
    delay = 0.2
    while True:
        try:
            with engine.connect():
                return
        except OperationalError as exc:
            if not any(reason in str(exc.orig).lower() for reason in _NOT_YET):
                raise
            if time.monotonic() + delay > deadline:
                raise
            if delay == 0.2:
                reason = str(exc.orig).splitlines()[0] if exc.orig else exc
                log.warning(
                    "job store %s not reachable (%s); waiting up to %.0f s", label, reason, wait_s
                )
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


STORE_FILE = "envfarm.db"


def default_url(data_dir: Path) -> str:
    """The embedded store of a data directory (``serve``, ``worker``) or a run's output."""
    return str(data_dir / STORE_FILE)
