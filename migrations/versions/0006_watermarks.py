"""watermarks: writer marks and per-stream watermarks

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-21 16:06:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "writer_marks",
        sa.Column("stream_id", sa.BigInteger(), nullable=False),
        sa.Column("writer", sa.Text(), nullable=False),
        sa.Column("mark_time", sa.BigInteger(), nullable=False),
        sa.Column(
            "position",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("alive", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column("inactive_since", sa.BigInteger(), nullable=True),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.ForeignKeyConstraint(["stream_id"], ["streams.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("stream_id", "writer", name="writer_marks_pkey"),
    )
    op.create_table(
        "watermarks",
        sa.Column("stream_id", sa.BigInteger(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("lower_time_bound", sa.BigInteger(), nullable=False),
        sa.Column("upper_time_bound", sa.BigInteger(), nullable=False),
        sa.Column("stream_cut", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("seq > 0", name="watermarks_seq_positive"),
        sa.ForeignKeyConstraint(["stream_id"], ["streams.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("stream_id", "seq", name="watermarks_pkey"),
    )


def downgrade() -> None:
    op.drop_table("watermarks")
    op.drop_table("writer_marks")
