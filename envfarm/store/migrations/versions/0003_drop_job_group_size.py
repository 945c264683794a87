"""The jobs table loses ``group_size``: it was written and never read (a group's size is its
episodes; the job's request keeps what was asked).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("group_size")


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("group_size", sa.Integer(), nullable=False, server_default="1"))
