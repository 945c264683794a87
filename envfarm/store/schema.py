"""Tables of the job store (SQLAlchemy Core; the Alembic migrations create them).

Times are epoch seconds as floats, written by the controllers' clocks: lease expiry compares
them across machines, so clocks must agree to well within a lease (seconds, not minutes).
Trajectories are stored as their JSON text: the store never interprets them beyond the few
columns it indexes.
"""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData()

jobs = Table(
    "jobs",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("name", String(200)),
    Column("status", String(16), nullable=False),
    Column("priority", Integer, nullable=False, default=0),
    Column("concurrency", Integer),
    Column("max_staleness", Integer),
    Column("stale_policy", String(8), nullable=False),
    Column("max_retries", Integer, nullable=False),
    Column("leave_one_out", Boolean, nullable=False, default=False),
    Column("request", Text, nullable=False),
    Column("last_cursor", Integer, nullable=False, default=0),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("error", Text),
)

groups = Table(
    "groups",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("job_id", String(64), ForeignKey("jobs.id"), nullable=False),
    Column("task_id", String(200), nullable=False),
    Column("task_hash", String(80), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("state", String(12), nullable=False),
    Column("dispatch_version", String(200)),
    Column("cursor", Integer),
    Column("staleness", Integer),
    Column("stale", Boolean, nullable=False, default=False),
    Column("zero_variance", Boolean),
    Column("replaces", String(64)),
    Column("error", Text),
    Column("completed_at", Float),
    UniqueConstraint("job_id", "cursor", name="uq_groups_job_cursor"),
    Index("ix_groups_job_state", "job_id", "state"),
    Index("ix_groups_job_seq", "job_id", "seq"),
)

episodes = Table(
    "episodes",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("job_id", String(64), ForeignKey("jobs.id"), nullable=False),
    Column("group_id", String(64), ForeignKey("groups.id"), nullable=False),
    Column("task_id", String(200), nullable=False),
    Column("index", Integer, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("state", String(8), nullable=False),
    Column("attempt", Integer, nullable=False, default=0),
    Column("seed", Integer),
    Column("lease_owner", String(120)),
    Column("lease_expires", Float),
    Column("trajectory_id", String(80)),
    Index("ix_episodes_job_state_seq", "job_id", "state", "seq"),
    Index("ix_episodes_group", "group_id"),
    Index("ix_episodes_owner", "lease_owner"),
    Index("ix_episodes_state_expires", "state", "lease_expires"),
)

attempts = Table(
    "attempts",
    metadata,
    Column("trajectory_id", String(80), primary_key=True),
    Column("episode_id", String(64), ForeignKey("episodes.id"), nullable=False, index=True),
    Column("job_id", String(64), nullable=False, index=True),
    Column("attempt", Integer, nullable=False),
    Column("worker", String(120)),
    Column("ended_at", Float, nullable=False),
    Column("final", Boolean, nullable=False),
    Column("valid", Boolean, nullable=False),
    Column("reward", Float),
    Column("error_type", String(120)),
    Column("error_message", Text),
    Column("infrastructure", Boolean, nullable=False, default=False),
    Column(
        "trajectory", Text, comment="JSON of a retried attempt; the final one is in trajectories"
    ),
)

trajectories = Table(
    "trajectories",
    metadata,
    Column("trajectory_id", String(80), primary_key=True),
    Column("episode_id", String(64), ForeignKey("episodes.id"), nullable=False, unique=True),
    Column("group_id", String(64), ForeignKey("groups.id"), nullable=False, index=True),
    Column("job_id", String(64), nullable=False, index=True),
    Column("data", Text, nullable=False),
)

packed_trajectories = Table(
    "packed_trajectories",
    metadata,
    Column(
        "trajectory_id",
        String(80),
        ForeignKey("trajectories.trajectory_id"),
        primary_key=True,
    ),
    Column(
        "packed",
        Text,
        nullable=False,
        comment="the trajectory's data with packed token arrays, made when its group completed",
    ),
)
"""A table of its own: after the JSON text in the same row, reading the copy walked the text's
overflow pages (migration 0005)."""

consumers = Table(
    "consumers",
    metadata,
    Column("job_id", String(64), ForeignKey("jobs.id"), primary_key=True),
    Column("name", String(200), primary_key=True),
    Column("acked", Integer, nullable=False, default=0),
    Column("updated_at", Float, nullable=False),
)

policy_versions = Table(
    "policy_versions",
    metadata,
    Column("version", String(200), primary_key=True),
    Column("seq", Integer, nullable=False, unique=True),
    Column("published_at", Float, nullable=False),
)

workers = Table(
    "workers",
    metadata,
    Column("id", String(120), primary_key=True),
    Column("host", String(200), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("started_at", Float, nullable=False),
    Column("heartbeat_at", Float, nullable=False),
    Column("stopped", Boolean, nullable=False, default=False),
)
