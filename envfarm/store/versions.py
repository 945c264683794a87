"""Policy versions: what the trainer published, in publication order.

The trainer publishes a version after each weight update. Each gets the next sequence number,
one publication at a time (an advisory lock on PostgreSQL; SQLite's ``BEGIN IMMEDIATE``
serializes writers already), so "how many publications behind" is a difference of numbers:
leasing holds back a group about to be too stale, and a completed group's staleness is its
dispatch version's distance from the current one. Publishing a known version again makes it
current without a new number.
"""

from __future__ import annotations

import time

from sqlalchemy import func, insert, select, update
from sqlalchemy.engine import Connection

from envfarm.store.schema import policy_versions

VERSIONS_LOCK_KEY = 0x76657273  # "vers": publications take the next sequence number one at a time


def publish(conn: Connection, version: str) -> None:
    if conn.dialect.name == "postgresql":  # SQLite's BEGIN IMMEDIATE serializes already
        conn.execute(select(func.pg_advisory_xact_lock(VERSIONS_LOCK_KEY)))
    now = time.time()
    exists = conn.execute(
        select(policy_versions.c.seq).where(policy_versions.c.version == version)
    ).first()
    if exists is not None:
        conn.execute(
            update(policy_versions)
            .where(policy_versions.c.version == version)
            .values(published_at=now)
        )
        return
    seq = conn.execute(select(func.coalesce(func.max(policy_versions.c.seq), 0))).scalar()
    conn.execute(
        insert(policy_versions).values(version=version, seq=int(seq or 0) + 1, published_at=now)
    )


def published(conn: Connection) -> tuple[list[str], str | None]:
    """Every published version in publication order, and the current one."""
    rows = conn.execute(select(policy_versions).order_by(policy_versions.c.seq)).all()
    current = max(rows, key=lambda r: r.published_at).version if rows else None
    return [r.version for r in rows], current


def version_seqs(conn: Connection) -> tuple[dict[str, int], int | None]:
    """Each version's sequence number, and the current version's."""
    rows = conn.execute(select(policy_versions)).all()
    seqs = {row.version: row.seq for row in rows}
    current = max(rows, key=lambda r: r.published_at).seq if rows else None
    return seqs, current
