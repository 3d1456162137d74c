"""foundation: scopes, streams and per-stream records

Revision ID: 0001
Revises:
Create Date: 2026-11-21 16:52:30.711834
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "deleted_streams",
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("last_segment_number", sa.Integer(), nullable=False),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.PrimaryKeyConstraint("scope", "name", name="deleted_streams_pkey"),
    )
    op.create_table(
        "embedded_segments",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("length", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("start_offset", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("sealed", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("scale_type", sa.SmallInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("target_rate", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("rollover_size_bytes", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("key_length", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.CheckConstraint("kind IN ('stream', 'transaction', 'table')", name="embedded_segments_kind_check"),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "scopes",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), server_default=sa.text("'ACTIVE'"), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.CheckConstraint("state IN ('ACTIVE', 'DELETING')", name="scopes_state_check"),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "streams",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("creation_time", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["scope"],
            ["scopes.name"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("scope", "name", name="streams_scope_name_key"),
    )
    op.create_table(
        "epochs",
        sa.Column("stream_id", sa.BigInteger(), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("reference_epoch", sa.Integer(), nullable=False),
        sa.Column("creation_time", sa.BigInteger(), nullable=False),
        sa.Column("splits", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("merges", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("segment_ids", sa.ARRAY(sa.BigInteger()), nullable=False),
        sa.Column("key_starts", sa.ARRAY(sa.Double()), nullable=False),
        sa.Column("key_ends", sa.ARRAY(sa.Double()), nullable=False),
        sa.Column("segment_creation_times", sa.ARRAY(sa.BigInteger()), nullable=False),
        sa.Column(
            "sealed_segments", sa.ARRAY(sa.BigInteger()), server_default=sa.text("'{}'"), nullable=False
        ),
        sa.Column(
            "created_segments", sa.ARRAY(sa.BigInteger()), server_default=sa.text("'{}'"), nullable=False
        ),
        sa.ForeignKeyConstraint(["stream_id"], ["streams.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("stream_id", "epoch", name="epochs_pkey"),
    )
    op.create_index("epochs_by_creation_time", "epochs", ["stream_id", "creation_time"], unique=False)
    op.create_table(
        "retention_set",
        sa.Column("stream_id", sa.BigInteger(), nullable=False),
        sa.Column("recording_time", sa.BigInteger(), nullable=False),
        sa.Column("recording_size", sa.BigInteger(), nullable=False),
        sa.Column("stream_cut", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.ForeignKeyConstraint(["stream_id"], ["streams.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("stream_id", "recording_time", name="retention_set_pkey"),
    )
    op.create_table(
        "sealed_size_shards",
        sa.Column("stream_id", sa.BigInteger(), nullable=False),
        sa.Column("shard", sa.Integer(), nullable=False),
        sa.Column(
            "sizes",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.ForeignKeyConstraint(["stream_id"], ["streams.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("stream_id", "shard", name="sealed_size_shards_pkey"),
    )
    op.create_table(
        "segments",
        sa.Column("stream_id", sa.BigInteger(), nullable=False),
        sa.Column("segment_id", sa.BigInteger(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("creation_epoch", sa.Integer(), nullable=False),
        sa.Column("creation_time", sa.BigInteger(), nullable=False),
        sa.Column("key_start", sa.Double(), nullable=False),
        sa.Column("key_end", sa.Double(), nullable=False),
        sa.Column("sealed_epoch", sa.Integer(), nullable=True),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.ForeignKeyConstraint(["stream_id"], ["streams.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("stream_id", "segment_id", name="segments_pkey"),
    )
    op.create_table(
        "stream_configs",
        sa.Column("stream_id", sa.BigInteger(), nullable=False),
        sa.Column("scale_type", sa.SmallInteger(), nullable=False),
        sa.Column("target_rate", sa.Integer(), nullable=False),
        sa.Column("scale_factor", sa.Integer(), nullable=False),
        sa.Column("min_num_segments", sa.Integer(), nullable=False),
        sa.Column("retention_type", sa.SmallInteger(), nullable=True),
        sa.Column("retention_param", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("retention_max", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("tags", sa.ARRAY(sa.Text()), server_default=sa.text("'{}'"), nullable=False),
        sa.Column(
            "timestamp_aggregation_timeout", sa.BigInteger(), server_default=sa.text("0"), nullable=False
        ),
        sa.Column("rollover_size_bytes", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("updating", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.ForeignKeyConstraint(["stream_id"], ["streams.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("stream_id"),
    )
    op.create_table(
        "stream_current_epochs",
        sa.Column("stream_id", sa.BigInteger(), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.ForeignKeyConstraint(["stream_id"], ["streams.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("stream_id"),
    )
    op.create_table(
        "stream_epoch_transitions",
        sa.Column("stream_id", sa.BigInteger(), nullable=False),
        sa.Column("active_epoch", sa.Integer(), server_default=sa.text("-1"), nullable=False),
        sa.Column("time", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column(
            "segments_to_seal", sa.ARRAY(sa.BigInteger()), server_default=sa.text("'{}'"), nullable=False
        ),
        sa.Column(
            "new_segment_ids", sa.ARRAY(sa.BigInteger()), server_default=sa.text("'{}'"), nullable=False
        ),
        sa.Column("new_key_starts", sa.ARRAY(sa.Double()), server_default=sa.text("'{}'"), nullable=False),
        sa.Column("new_key_ends", sa.ARRAY(sa.Double()), server_default=sa.text("'{}'"), nullable=False),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.ForeignKeyConstraint(["stream_id"], ["streams.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("stream_id"),
    )
    op.create_table(
        "stream_states",
        sa.Column("stream_id", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.CheckConstraint(
            "state IN ('UNKNOWN', 'CREATING', 'ACTIVE', 'UPDATING', 'SCALING', 'COMMITTING_TXN', 'TRUNCATING', 'SEALING', 'SEALED')",
            name="stream_states_state_check",
        ),
        sa.ForeignKeyConstraint(["stream_id"], ["streams.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("stream_id"),
    )
    op.create_table(
        "stream_tags",
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("tag", sa.Text(), nullable=False),
        sa.Column("stream", sa.Text(), nullable=False),
        sa.Column("stream_id", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["stream_id"], ["streams.id"], name="stream_tags_stream_fk", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("scope", "tag", "stream", name="stream_tags_pkey"),
    )
    op.create_index("stream_tags_by_stream", "stream_tags", ["stream_id"], unique=False)
    op.create_table(
        "stream_truncations",
        sa.Column("stream_id", sa.BigInteger(), nullable=False),
        sa.Column(
            "stream_cut",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "span",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "deleted_segments", sa.ARRAY(sa.BigInteger()), server_default=sa.text("'{}'"), nullable=False
        ),
        sa.Column("to_delete", sa.ARRAY(sa.BigInteger()), server_default=sa.text("'{}'"), nullable=False),
        sa.Column("size_till", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("updating", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.ForeignKeyConstraint(["stream_id"], ["streams.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("stream_id"),
    )


def downgrade() -> None:
    op.drop_table("stream_truncations")
    op.drop_index("stream_tags_by_stream", table_name="stream_tags")
    op.drop_table("stream_tags")
    op.drop_table("stream_states")
    op.drop_table("stream_epoch_transitions")
    op.drop_table("stream_current_epochs")
    op.drop_table("stream_configs")
    op.drop_table("segments")
    op.drop_table("sealed_size_shards")
    op.drop_table("retention_set")
    op.drop_index("epochs_by_creation_time", table_name="epochs")
    op.drop_table("epochs")
    op.drop_table("streams")
    op.drop_table("scopes")
    op.drop_table("embedded_segments")
    op.drop_table("deleted_streams")
