"""Indexes for the worker's tick: expired and running leases are found by state and expiry,
and a job's next queued episodes in ``seq`` order straight from the index (no sort of every
queued episode of the job on each lease).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_episodes_state_expires", "episodes", ["state", "lease_expires"])
    op.create_index("ix_episodes_job_state_seq", "episodes", ["job_id", "state", "seq"])
    op.drop_index("ix_episodes_job_state", table_name="episodes")


def downgrade() -> None:
    op.create_index("ix_episodes_job_state", "episodes", ["job_id", "state"])
    op.drop_index("ix_episodes_job_state_seq", table_name="episodes")
    op.drop_index("ix_episodes_state_expires", table_name="episodes")
