"""reader groups

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-21 18:09:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "reader_groups",
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("id", postgresql.UUID(), nullable=False),
        sa.Column("generation", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("config", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("updating", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.CheckConstraint("state IN ('CREATING', 'ACTIVE', 'DELETING')", name="reader_groups_state_check"),
        sa.CheckConstraint("generation >= 0", name="reader_groups_generation_check"),
        sa.ForeignKeyConstraint(["scope"], ["scopes.name"]),
        sa.PrimaryKeyConstraint("scope", "name", name="reader_groups_pkey"),
    )


def downgrade() -> None:
    op.drop_table("reader_groups")
