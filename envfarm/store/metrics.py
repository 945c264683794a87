"""The store's figures for ``GET /metrics``: episodes by state, and each job's staleness.

They are store-wide, so every process that serves metrics reports the same (docs/api.md); the
per-process counters are the controller's.
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from envfarm.store.schema import episodes, groups, jobs


def episode_states(conn: Connection) -> dict[str, int]:
    rows = conn.execute(select(episodes.c.state, func.count()).group_by(episodes.c.state)).all()
    return {row[0]: int(row[1]) for row in rows}


def staleness(conn: Connection) -> dict[str, int]:
    """Per running job: the staleness of its newest completed group."""
    rows = conn.execute(
        select(groups.c.job_id, groups.c.staleness, groups.c.cursor)
        .join(jobs, jobs.c.id == groups.c.job_id)
        .where(jobs.c.status == "running", groups.c.staleness.is_not(None))
        .order_by(groups.c.cursor)
    ).all()
    return {row.job_id: int(row.staleness) for row in rows}
