"""Trajectories gain ``packed``: the compact form of ``data`` (token arrays as packed int32 and
float32), written once when the group completes so compact answers need no re-encoding. Rows
without it (completed before this revision) are packed when delivered.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("trajectories") as batch:
        batch.add_column(
            sa.Column(
                "packed",
                sa.Text(),
                nullable=True,
                comment="data with packed token arrays, made when the group completed",
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("trajectories") as batch:
        batch.drop_column("packed")
