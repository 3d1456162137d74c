"""stream report totals: each stream's segment counts and sealed bytes, kept as they are written

reporting.streams reported segments_created, segments_sealed and sealed_bytes by counting every
segment and expanding every sealed-size shard of the stream: linear in its history (6.9 s for a
31M-epoch stream). These totals are kept instead by statement-level triggers on `segments` and
`sealed_size_shards`, in the transaction of the write, so every writer (the scale and rolling
workflows, the seeders' COPY and INSERT ... SELECT) keeps them without knowing of them. One
statement of any size costs one aggregate over its transition rows and one upsert per stream.
Also an index on segments by (stream, creation time): reporting.segments's window reads.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-25 04:50:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The totals are deltas added under the row lock of an upsert, so concurrent writers of one
# stream commute; `version` moves with every change for readers that cache a row. A transition
# table belongs to one event, hence one trigger (and one function) per event and table.
# A cascade from a deleted stream removes the totals row itself; the delete triggers' updates
# then find no row, which is what they should do.
_UPSERT = """INSERT INTO stream_report_totals AS t (stream_id, segments_created, segments_sealed, sealed_bytes)
        SELECT d.stream_id, sum(d.created), sum(d.sealed), sum(d.bytes) FROM ({deltas}) d
        GROUP BY d.stream_id
        HAVING sum(d.created) <> 0 OR sum(d.sealed) <> 0 OR sum(d.bytes) <> 0
        ON CONFLICT (stream_id) DO UPDATE
        SET segments_created = t.segments_created + EXCLUDED.segments_created,
            segments_sealed = t.segments_sealed + EXCLUDED.segments_sealed,
            sealed_bytes = t.sealed_bytes + EXCLUDED.sealed_bytes,
            version = t.version + 1"""

_UPDATE = """UPDATE stream_report_totals t
        SET segments_created = t.segments_created + d.created,
            segments_sealed = t.segments_sealed + d.sealed,
            sealed_bytes = t.sealed_bytes + d.bytes,
            version = t.version + 1
        FROM (SELECT stream_id, sum(created) AS created, sum(sealed) AS sealed, sum(bytes) AS bytes
              FROM ({deltas}) x GROUP BY stream_id) d
        WHERE t.stream_id = d.stream_id"""


def _shard_bytes(rows: str, sign: str) -> str:
    return (
        f"SELECT z.stream_id, 0::bigint AS created, 0::bigint AS sealed, "
        f"{sign}COALESCE(sum(kv.value::bigint), 0)::bigint AS bytes "
        f"FROM {rows} z CROSS JOIN LATERAL jsonb_each_text(z.sizes) kv GROUP BY z.stream_id"
    )


def _segment_counts(rows: str, sign: str, created: bool) -> str:
    made = f"{sign}count(*)" if created else "0"
    return (
        f"SELECT stream_id, ({made})::bigint AS created, ({sign}count(sealed_epoch))::bigint AS sealed, "
        f"0::bigint AS bytes FROM {rows} GROUP BY stream_id"
    )


# (function name, table, event, statement)
_TRIGGERS: list[tuple[str, str, str, str]] = [
    (
        "pgc_totals_segments_inserted",
        "segments",
        "INSERT",
        _UPSERT.format(deltas=_segment_counts("new_rows", "", True)),
    ),
    (
        "pgc_totals_segments_updated",
        "segments",
        "UPDATE",
        _UPDATE.format(
            deltas=_segment_counts("new_rows", "", False)
            + " UNION ALL "
            + _segment_counts("old_rows", "-", False)
        ),
    ),
    (
        "pgc_totals_segments_deleted",
        "segments",
        "DELETE",
        _UPDATE.format(deltas=_segment_counts("old_rows", "-", True)),
    ),
    (
        "pgc_totals_shards_inserted",
        "sealed_size_shards",
        "INSERT",
        _UPSERT.format(deltas=_shard_bytes("new_rows", "")),
    ),
    (
        "pgc_totals_shards_updated",
        "sealed_size_shards",
        "UPDATE",
        _UPDATE.format(deltas=_shard_bytes("new_rows", "") + " UNION ALL " + _shard_bytes("old_rows", "-")),
    ),
    (
        "pgc_totals_shards_deleted",
        "sealed_size_shards",
        "DELETE",
        _UPDATE.format(deltas=_shard_bytes("old_rows", "-")),
    ),
]

_BACKFILL = """INSERT INTO stream_report_totals (stream_id, segments_created, segments_sealed, sealed_bytes)
SELECT s.id, COALESCE(g.created, 0), COALESCE(g.sealed, 0), COALESCE(b.bytes, 0)
FROM streams s
LEFT JOIN (SELECT stream_id, count(*) AS created, count(sealed_epoch) AS sealed
           FROM segments GROUP BY stream_id) g ON g.stream_id = s.id
LEFT JOIN (SELECT z.stream_id, sum(kv.value::bigint)::bigint AS bytes
           FROM sealed_size_shards z CROSS JOIN LATERAL jsonb_each_text(z.sizes) kv
           GROUP BY z.stream_id) b ON b.stream_id = s.id
WHERE g.stream_id IS NOT NULL OR b.stream_id IS NOT NULL"""


def upgrade() -> None:
    op.create_table(
        "stream_report_totals",
        sa.Column("stream_id", sa.BigInteger(), nullable=False),
        sa.Column("segments_created", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("segments_sealed", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("sealed_bytes", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.ForeignKeyConstraint(["stream_id"], ["streams.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("stream_id"),
    )
    # Backfilled before the triggers exist, in the migration's transaction (writers wait on the
    # table locks the triggers' creation takes, so no write falls between the two).
    op.execute("LOCK TABLE segments, sealed_size_shards IN SHARE ROW EXCLUSIVE MODE")
    op.execute(_BACKFILL)
    for function, table, event, statement in _TRIGGERS:
        op.execute(
            f"CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$\n"
            f"BEGIN\n    {statement};\n    RETURN NULL;\nEND $$"
        )
        rows = "NEW TABLE AS new_rows" if event == "INSERT" else "OLD TABLE AS old_rows"
        if event == "UPDATE":
            rows = "OLD TABLE AS old_rows NEW TABLE AS new_rows"
        op.execute(
            f"CREATE TRIGGER {function} AFTER {event} ON {table} REFERENCING {rows} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {function}()"
        )
    op.create_index("segments_by_creation_time", "segments", ["stream_id", "creation_time"], unique=False)


def downgrade() -> None:
    op.drop_index("segments_by_creation_time", table_name="segments")
    for function, table, _event, _statement in _TRIGGERS:
        op.execute(f"DROP TRIGGER {function} ON {table}")
        op.execute(f"DROP FUNCTION {function}()")
    op.drop_table("stream_report_totals")
