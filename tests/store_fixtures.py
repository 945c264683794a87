"""Database fixtures: a fresh PostgreSQL database per test module, ``db_url`` over both stores,
and ``store``, a store on it that completes groups as the controller does.

PostgreSQL is the real server ``scripts/setup`` starts, reached as the role ``envfarm`` (which
may create databases) at ``ENVFARM_TEST_PG_URL`` (default: loopback, port 5432, database
``postgres``). Like Docker, a missing server fails the tests that need it instead of skipping.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
from alembic import command
from psycopg import sql
from sqlalchemy.engine import Engine

from envfarm.controller.groups import finalize_group
from envfarm.models.trajectory import ErrorInfo, Provenance, Reward, Trajectory, Turn
from envfarm.store.leases import Lease
from envfarm.store.migrate import alembic_config
from envfarm.store.store import Store

DEFAULT_PG_URL = "postgresql+psycopg://envfarm:envfarm@127.0.0.1:5432/postgres"


def _admin_url() -> str:
    return os.environ.get("ENVFARM_TEST_PG_URL", DEFAULT_PG_URL)


def _libpq(url: str) -> str:
    """SQLAlchemy's ``postgresql+psycopg://`` URL as plain libpq accepts it."""
    return "postgresql://" + url.split("://", 1)[1]


def _with_database(url: str, database: str) -> str:
    base, _, query = url.partition("?")
    base = base.rsplit("/", 1)[0] + "/" + database
    return f"{base}?{query}" if query else base


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    """A new, empty PostgreSQL database for this test module, dropped afterwards."""
    admin = _admin_url()
    name = f"envfarm_test_{uuid.uuid4().hex[:12]}"
    try:
        connection = psycopg.connect(_libpq(admin), autocommit=True, connect_timeout=10)
    except psycopg.OperationalError as exc:
        pytest.fail(
            f"PostgreSQL is not reachable at ENVFARM_TEST_PG_URL ({exc}); run scripts/setup"
        )
    with connection:
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield _with_database(admin, name)
    finally:
        with psycopg.connect(_libpq(admin), autocommit=True) as connection:
            connection.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The URL of an empty database, once on a SQLite file and once on PostgreSQL."""
    if request.param == "postgresql":
        return str(request.getfixturevalue("pg_url"))
    directory: Path = tmp_path_factory.mktemp("sqlite")
    return f"sqlite:///{directory / 'envfarm.db'}"


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    """A store on ``db_url`` that completes groups (``finalize_group``); the jobs a test leaves
    open are cancelled after it, as the database is shared by the module's tests."""
    opened = await Store.open(db_url, finalize=finalize_group)
    yield opened
    for view in await opened.jobs():
        if view.status in ("queued", "running", "paused"):
            await opened.transition(view.id, "cancel")
    await opened.close()


def leased_result(
    lease: Lease,
    turns: list[Turn],
    *,
    attempt: int | None = None,
    reward: float | None = 1.0,
    error: ErrorInfo | None = None,
) -> Trajectory:
    """The lease's episode ended with ``turns``, a reward of ``reward`` (None: no valid
    reward) and ``error``; ``attempt``: the lease's unless given."""
    return Trajectory(
        trajectory_id=f"{lease.episode_id}-a{lease.attempt}",
        episode_id=lease.episode_id,
        job_id=lease.job_id,
        group_id=lease.group_id,
        task_id=lease.task_id,
        attempt=lease.attempt if attempt is None else attempt,
        turns=turns,
        reward=Reward(value=reward, valid=reward is not None),
        error=error,
        provenance=Provenance(task_hash=lease.task_hash, envfarm_version="test"),
    )


def migrate(engine: Engine, revision: str, down: bool = False) -> None:
    """Upgrade (or downgrade) the database to ``revision`` with the store's own migrations."""
    with engine.begin() as connection:
        config = alembic_config(connection)
        (command.downgrade if down else command.upgrade)(config, revision)
