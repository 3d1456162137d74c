"""auto-scaling: cold-segment markers and traffic reports

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-21 16:07:00.000000

Reports need no table of their own: they are AUTO_SCALE rows in the request queue, whose kind
column carries no CHECK constraint.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "segment_cold_markers",
        sa.Column("stream_id", sa.BigInteger(), nullable=False),
        sa.Column("segment_id", sa.BigInteger(), nullable=False),
        sa.Column("until", sa.BigInteger(), nullable=False),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.ForeignKeyConstraint(["stream_id"], ["streams.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("stream_id", "segment_id", name="segment_cold_markers_pkey"),
    )


def downgrade() -> None:
    op.drop_table("segment_cold_markers")
