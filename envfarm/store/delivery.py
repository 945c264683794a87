"""Delivery: completed groups read in cursor order, and how far each consumer acknowledged.

A completed group takes its job's next cursor (``envfarm.store.groups``), so a page is "the
groups above a cursor, in order". A reader that names no cursor starts from its consumer's
acknowledgement; an acknowledgement only moves forward, whatever commits first, and may not
name a cursor that was never delivered. A page also says whether it ends the job's delivery:
the job had ended when the page was read (in the same transaction) and no group comes after it,
so a reader can stop without asking again.
"""

from __future__ import annotations

import time

from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from envfarm.errors import InvalidJobState
from envfarm.models.jobs import RawGroup
from envfarm.store.schema import consumers, groups, jobs
from envfarm.store.views import Forms, delivered_groups, is_terminal, job_row


def page(
    conn: Connection,
    job_id: str,
    after: int | None,
    limit: int,
    consumer: str,
    max_bytes: int | None,
    forms: Forms,
) -> tuple[list[RawGroup], int, bool]:
    """Up to ``limit`` completed groups above ``after`` (None: the consumer's
    acknowledgement), the job's last cursor, and whether this page ends the job's delivery."""
    job = job_row(conn, job_id, jobs.c.status, jobs.c.last_cursor)
    start = after if after is not None else acked(conn, job_id, consumer)
    rows = conn.execute(
        select(groups)
        .where(groups.c.job_id == job_id, groups.c.cursor > start)
        .order_by(groups.c.cursor)
        .limit(limit)
    ).mappings()
    found = delivered_groups(conn, list(rows), forms, max_bytes)
    last = int(job["last_cursor"])
    reached = found[-1].cursor if found else start
    return found, last, is_terminal(job["status"]) and reached >= last


def ack(conn: Connection, job_id: str, cursor: int, consumer: str) -> int:
    """Acknowledge ``cursor`` for ``consumer``; the consumer's acknowledgement after it."""
    job = job_row(conn, job_id, jobs.c.last_cursor)
    if cursor > job["last_cursor"] or cursor < 0:
        raise InvalidJobState(
            f"cursor {cursor} of job {job_id} was never delivered "
            f"(the newest is {job['last_cursor']})",
            field="cursor",
        )
    _create_consumer(conn, job_id, consumer)
    conn.execute(
        update(consumers)
        .where(
            consumers.c.job_id == job_id,
            consumers.c.name == consumer,
            consumers.c.acked < cursor,  # never backwards, whatever commits first
        )
        .values(acked=cursor, updated_at=time.time())
    )
    return acked(conn, job_id, consumer)


def acked(conn: Connection, job_id: str, consumer: str) -> int:
    cursor = conn.execute(
        select(consumers.c.acked).where(consumers.c.job_id == job_id, consumers.c.name == consumer)
    ).scalar()
    return int(cursor or 0)


def _create_consumer(conn: Connection, job_id: str, consumer: str) -> None:
    """The consumer's row, created once even when two first acks race."""
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    values = {"job_id": job_id, "name": consumer, "acked": 0, "updated_at": time.time()}
    conn.execute(dialect.insert(consumers).values(**values).on_conflict_do_nothing())
