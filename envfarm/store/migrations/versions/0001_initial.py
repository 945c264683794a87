"""Initial schema: jobs, groups, episodes, attempts, trajectories, cursors, versions, workers

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=True),
        sa.Column("max_staleness", sa.Integer(), nullable=True),
        sa.Column("stale_policy", sa.String(length=8), nullable=False),
        sa.Column("group_size", sa.Integer(), nullable=False),
        sa.Column("max_retries", sa.Integer(), nullable=False),
        sa.Column("request", sa.Text(), nullable=False),
        sa.Column("last_cursor", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "policy_versions",
        sa.Column("version", sa.String(length=200), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("published_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("version"),
        sa.UniqueConstraint("seq"),
    )
    op.create_table(
        "workers",
        sa.Column("id", sa.String(length=120), nullable=False),
        sa.Column("host", sa.String(length=200), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("heartbeat_at", sa.Float(), nullable=False),
        sa.Column("stopped", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "consumers",
        sa.Column("job_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("acked", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
        ),
        sa.PrimaryKeyConstraint("job_id", "name"),
    )
    op.create_table(
        "groups",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("job_id", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=200), nullable=False),
        sa.Column("task_hash", sa.String(length=80), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=12), nullable=False),
        sa.Column("dispatch_version", sa.String(length=200), nullable=True),
        sa.Column("cursor", sa.Integer(), nullable=True),
        sa.Column("staleness", sa.Integer(), nullable=True),
        sa.Column("stale", sa.Boolean(), nullable=False),
        sa.Column("zero_variance", sa.Boolean(), nullable=True),
        sa.Column("replaces", sa.String(length=64), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("completed_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("job_id", "cursor", name="uq_groups_job_cursor"),
    )
    with op.batch_alter_table("groups", schema=None) as batch_op:
        batch_op.create_index("ix_groups_job_state", ["job_id", "state"], unique=False)

    op.create_table(
        "episodes",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("job_id", sa.String(length=64), nullable=False),
        sa.Column("group_id", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=200), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=8), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=True),
        sa.Column("lease_owner", sa.String(length=120), nullable=True),
        sa.Column("lease_expires", sa.Float(), nullable=True),
        sa.Column("trajectory_id", sa.String(length=80), nullable=True),
        sa.ForeignKeyConstraint(
            ["group_id"],
            ["groups.id"],
        ),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("episodes", schema=None) as batch_op:
        batch_op.create_index("ix_episodes_group", ["group_id"], unique=False)
        batch_op.create_index("ix_episodes_job_state", ["job_id", "state"], unique=False)
        batch_op.create_index("ix_episodes_owner", ["lease_owner"], unique=False)

    op.create_table(
        "attempts",
        sa.Column("trajectory_id", sa.String(length=80), nullable=False),
        sa.Column("episode_id", sa.String(length=64), nullable=False),
        sa.Column("job_id", sa.String(length=64), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("worker", sa.String(length=120), nullable=True),
        sa.Column("ended_at", sa.Float(), nullable=False),
        sa.Column("final", sa.Boolean(), nullable=False),
        sa.Column("valid", sa.Boolean(), nullable=False),
        sa.Column("reward", sa.Float(), nullable=True),
        sa.Column("error_type", sa.String(length=120), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("infrastructure", sa.Boolean(), nullable=False),
        sa.Column(
            "trajectory",
            sa.Text(),
            nullable=True,
            comment="JSON of a retried attempt; the final one is in trajectories",
        ),
        sa.ForeignKeyConstraint(
            ["episode_id"],
            ["episodes.id"],
        ),
        sa.PrimaryKeyConstraint("trajectory_id"),
    )
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_attempts_episode_id"), ["episode_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_attempts_job_id"), ["job_id"], unique=False)

    op.create_table(
        "trajectories",
        sa.Column("trajectory_id", sa.String(length=80), nullable=False),
        sa.Column("episode_id", sa.String(length=64), nullable=False),
        sa.Column("group_id", sa.String(length=64), nullable=False),
        sa.Column("job_id", sa.String(length=64), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["episode_id"],
            ["episodes.id"],
        ),
        sa.ForeignKeyConstraint(
            ["group_id"],
            ["groups.id"],
        ),
        sa.PrimaryKeyConstraint("trajectory_id"),
        sa.UniqueConstraint("episode_id"),
    )
    with op.batch_alter_table("trajectories", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_trajectories_group_id"), ["group_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_trajectories_job_id"), ["job_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("trajectories", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_trajectories_job_id"))
        batch_op.drop_index(batch_op.f("ix_trajectories_group_id"))

    op.drop_table("trajectories")
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_attempts_job_id"))
        batch_op.drop_index(batch_op.f("ix_attempts_episode_id"))

    op.drop_table("attempts")
    with op.batch_alter_table("episodes", schema=None) as batch_op:
        batch_op.drop_index("ix_episodes_owner")
        batch_op.drop_index("ix_episodes_job_state")
        batch_op.drop_index("ix_episodes_group")

    op.drop_table("episodes")
    with op.batch_alter_table("groups", schema=None) as batch_op:
        batch_op.drop_index("ix_groups_job_state")

    op.drop_table("groups")
    op.drop_table("consumers")
    op.drop_table("workers")
    op.drop_table("policy_versions")
    op.drop_table("jobs")
