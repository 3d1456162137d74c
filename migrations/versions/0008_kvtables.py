"""key-value tables

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-21 18:08:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "kvtables",
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("id", postgresql.UUID(), nullable=False),
        sa.Column("partition_count", sa.Integer(), nullable=False),
        sa.Column("primary_key_length", sa.Integer(), nullable=False),
        sa.Column("secondary_key_length", sa.Integer(), nullable=False),
        sa.Column("rollover_size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("start_number", sa.Integer(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("creation_time", sa.BigInteger(), nullable=False),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.CheckConstraint("state IN ('CREATING', 'ACTIVE', 'DELETING')", name="kvtables_state_check"),
        sa.CheckConstraint(
            "partition_count > 0 AND primary_key_length > 0 AND secondary_key_length >= 0 "
            "AND rollover_size_bytes >= 0 AND start_number >= 0",
            name="kvtables_config_check",
        ),
        sa.ForeignKeyConstraint(["scope"], ["scopes.name"]),
        sa.PrimaryKeyConstraint("scope", "name", name="kvtables_pkey"),
        sa.UniqueConstraint("id", name="kvtables_id_key"),
    )
    op.create_table(
        "deleted_kvtables",
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("last_segment_number", sa.Integer(), nullable=False),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.PrimaryKeyConstraint("scope", "name", name="deleted_kvtables_pkey"),
    )


def downgrade() -> None:
    op.drop_table("deleted_kvtables")
    op.drop_table("kvtables")
