"""retention: stream-cut records, subscribers and their cuts

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-21 16:05:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # The retention set itself (retention_set) exists since 0001 and is used unchanged.
    op.create_table(
        "stream_subscribers",
        sa.Column("stream_id", sa.BigInteger(), nullable=False),
        sa.Column("subscriber", sa.Text(), nullable=False),
        sa.Column("reader_group_id", postgresql.UUID(), nullable=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.Column(
            "truncation_stream_cut",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("update_time", sa.BigInteger(), nullable=False),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.ForeignKeyConstraint(["stream_id"], ["streams.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("stream_id", "subscriber", name="stream_subscribers_pkey"),
    )


def downgrade() -> None:
    op.drop_table("stream_subscribers")
