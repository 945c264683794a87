"""The packed copies move out of ``trajectories`` into a table of their own.

SQLite stores a row's columns one after another, and a 40 KB trajectory's JSON text spills over
about ten overflow pages: reading the packed copy that followed it in the same row walked that
chain of pages first, for every trajectory of a packed answer. In ``packed_trajectories`` the
copy is read by its key alone, and the JSON answer (and its text) is read as before.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

COMMENT = "the trajectory's data with packed token arrays, made when its group completed"


def upgrade() -> None:
    op.create_table(
        "packed_trajectories",
        sa.Column("trajectory_id", sa.String(length=80), nullable=False),
        sa.Column("packed", sa.Text(), nullable=False, comment=COMMENT),
        sa.ForeignKeyConstraint(["trajectory_id"], ["trajectories.trajectory_id"]),
        sa.PrimaryKeyConstraint("trajectory_id"),
    )
    op.execute(
        "INSERT INTO packed_trajectories (trajectory_id, packed) "
        "SELECT trajectory_id, packed FROM trajectories WHERE packed IS NOT NULL"
    )
    with op.batch_alter_table("trajectories") as batch:
        batch.drop_column("packed")


def downgrade() -> None:
    with op.batch_alter_table("trajectories") as batch:
        batch.add_column(sa.Column("packed", sa.Text(), nullable=True))
    op.execute(
        "UPDATE trajectories SET packed = (SELECT p.packed FROM packed_trajectories p "
        "WHERE p.trajectory_id = trajectories.trajectory_id)"
    )
    op.drop_table("packed_trajectories")
