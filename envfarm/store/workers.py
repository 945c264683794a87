"""Worker processes in the store: registered when they start, stopped when they stop.

A worker that dies holds its leases until they expire. Its host knows sooner: a process of a
worker registered on this host that no longer runs is dead, so its leases are made to expire
at once (and then recorded as lost attempts, ``envfarm.store.results``) rather than after the
lease's seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sqlalchemy import insert, select, update
from sqlalchemy.engine import Connection

from envfarm.store.results import expire_leases_of
from envfarm.store.schema import workers


def register(conn: Connection, worker_id: str, host: str, pid: int) -> None:
    now = time.time()
    conn.execute(
        insert(workers).values(
            id=worker_id,
            host=host,
            pid=pid,
            started_at=now,
            heartbeat_at=now,
            stopped=False,
        )
    )


def reclaim_dead(conn: Connection, host: str, alive: Callable[[int], bool]) -> int:
    """Mark this host's workers whose process is gone stopped and expire their leases now;
    how many there were."""
    rows = conn.execute(
        select(workers.c.id, workers.c.pid).where(
            workers.c.host == host, workers.c.stopped.is_(False)
        )
    ).all()
    dead = [row.id for row in rows if not alive(row.pid)]
    if dead:
        conn.execute(update(workers).where(workers.c.id.in_(dead)).values(stopped=True))
        expire_leases_of(conn, dead)
    return len(dead)


def stop(conn: Connection, worker_id: str) -> None:
    conn.execute(update(workers).where(workers.c.id == worker_id).values(stopped=True))
