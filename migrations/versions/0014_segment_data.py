"""segment data: the embedded segment store's bytes, attributes and table entries

- `embedded_segments.last_modified`: milliseconds of the segment's last change (an append, a
  seal, a truncation, a merge, a table write); kind 'transient' joins the kinds (the large-event
  writer's scratch segment).
- `segment_chunks`: a stream segment's bytes, one row per append keyed by its start offset;
  a merge moves the source's rows to the target's end (offsets renumbered, bytes untouched).
- `segment_attributes`: a segment's attributes (writer ids' event numbers, client attributes);
  absent means NULL_ATTRIBUTE_VALUE. `previous_value` is the value an update replaced, so an
  append learns the writer's previous event number in the statement that advances it.
- `table_entries`: a table segment's live keys; `version` is the key's version, a position in
  the table (the table's length counts positions), so a delta read is a range scan on it.

Every row belongs to its segment (ON DELETE CASCADE): deleting a segment leaves nothing behind
for a re-created one. Byte columns are stored uncompressed (EXTERNAL): event payloads rarely
compress, and trying costs the append path CPU.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-24 15:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _segment_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["segment"], ["embedded_segments.name"], name=f"{table}_segment_fkey", ondelete="CASCADE"
    )


def upgrade() -> None:
    op.add_column(
        "embedded_segments",
        sa.Column("last_modified", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
    )
    op.drop_constraint("embedded_segments_kind_check", "embedded_segments", type_="check")
    op.create_check_constraint(
        "embedded_segments_kind_check",
        "embedded_segments",
        "kind IN ('stream', 'transaction', 'table', 'transient')",
    )
    op.create_table(
        "segment_chunks",
        sa.Column("segment", sa.Text(), nullable=False),
        sa.Column("start_offset", sa.BigInteger(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        _segment_fk("segment_chunks"),
        sa.PrimaryKeyConstraint("segment", "start_offset", name="segment_chunks_pkey"),
    )
    op.create_table(
        "segment_attributes",
        sa.Column("segment", sa.Text(), nullable=False),
        sa.Column("attribute_id", postgresql.UUID(), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.Column("previous_value", sa.BigInteger(), nullable=True),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        _segment_fk("segment_attributes"),
        sa.PrimaryKeyConstraint("segment", "attribute_id", name="segment_attributes_pkey"),
    )
    op.create_table(
        "table_entries",
        sa.Column("segment", sa.Text(), nullable=False),
        sa.Column("key", sa.LargeBinary(), nullable=False),
        sa.Column("value", sa.LargeBinary(), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        _segment_fk("table_entries"),
        sa.PrimaryKeyConstraint("segment", "key", name="table_entries_pkey"),
    )
    op.create_index("table_entries_by_version", "table_entries", ["segment", "version"])
    op.execute("ALTER TABLE segment_chunks ALTER COLUMN data SET STORAGE EXTERNAL")
    op.execute("ALTER TABLE table_entries ALTER COLUMN value SET STORAGE EXTERNAL")


def downgrade() -> None:
    op.drop_index("table_entries_by_version", table_name="table_entries")
    op.drop_table("table_entries")
    op.drop_table("segment_attributes")
    op.drop_table("segment_chunks")
    op.execute("DELETE FROM embedded_segments WHERE kind = 'transient'")
    op.drop_constraint("embedded_segments_kind_check", "embedded_segments", type_="check")
    op.create_check_constraint(
        "embedded_segments_kind_check", "embedded_segments", "kind IN ('stream', 'transaction', 'table')"
    )
    op.drop_column("embedded_segments", "last_modified")
