"""truncation history, completion details written by the completing statement

- `truncation_history`: one insert-only row per completed truncation (when, the cut, the bytes
  it removed and the running total, the segments it deleted). The stream's truncation record
  keeps only the latest truncation, so without this the reporting side could not say when
  bytes were truncated.
- `transactions.requested_at`: when the commit or abort was requested, written by the status
  move itself, so the statements completing transactions write `completed_txn_details`
  directly. That replaces the statement trigger of 0011, whose look-up of the queued requests
  tripled a completion batch's cost.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-21 20:05:00.000000
"""

import importlib
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Transactions already COMMITTING or ABORTING keep the request time the trigger would have
# looked up: the earliest queued commit/abort request naming them.
_BACKFILL_REQUESTED_AT = """UPDATE transactions t SET requested_at = rq.requested_at
FROM (
    SELECT k.id AS stream_id, r.processor, r.payload ->> 'txn_high' AS high,
           r.payload ->> 'txn_low' AS low, min(r.created_at) AS requested_at
    FROM requests r JOIN streams k ON k.scope = r.scope AND k.name = r.stream
    WHERE r.processor IN ('commits', 'aborts')
    GROUP BY 1, 2, 3, 4
) rq
WHERE t.status IN ('COMMITTING', 'ABORTING') AND rq.stream_id = t.stream_id
  AND rq.processor = CASE t.status WHEN 'COMMITTING' THEN 'commits' ELSE 'aborts' END
  AND rq.high = t.txn_high::text AND rq.low = t.txn_low::text"""

# Truncations completed before this revision have no time: one row per stream sums them up,
# dated at the migration (documented in sql/reporting/README.md). A truncation in progress is
# left to its completion, which then reports every byte truncated so far.
_BACKFILL_HISTORY = """INSERT INTO truncation_history (stream_id, completed_at, stream_cut, truncated_bytes,
    total_truncated_bytes, deleted_segments)
SELECT t.stream_id, (extract(epoch FROM clock_timestamp()) * 1000)::bigint, t.stream_cut, t.size_till,
       t.size_till, t.deleted_segments
FROM stream_truncations t
WHERE NOT t.updating AND t.stream_cut <> '{}'::jsonb"""


def upgrade() -> None:
    op.add_column("transactions", sa.Column("requested_at", sa.BigInteger(), nullable=True))
    op.execute(_BACKFILL_REQUESTED_AT)
    op.execute("DROP TRIGGER IF EXISTS transactions_keep_details ON transactions")
    op.execute("DROP FUNCTION IF EXISTS pgc_keep_completed_txn_details()")

    op.create_table(
        "truncation_history",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("stream_id", sa.BigInteger(), nullable=False),
        sa.Column("completed_at", sa.BigInteger(), nullable=False),
        sa.Column("stream_cut", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("truncated_bytes", sa.BigInteger(), nullable=False),
        sa.Column("total_truncated_bytes", sa.BigInteger(), nullable=False),
        sa.Column("deleted_segments", sa.ARRAY(sa.BigInteger()), nullable=False),
        sa.CheckConstraint("truncated_bytes >= 0", name="truncation_history_bytes_check"),
        sa.ForeignKeyConstraint(["stream_id"], ["streams.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="truncation_history_pkey"),
    )
    # The latest row of a stream (the running total a completion builds on) and reads by stream.
    op.create_index("truncation_history_by_stream", "truncation_history", ["stream_id", "id"])
    # Incremental reads ("truncations completed since T", over every stream).
    op.create_index("truncation_history_by_time", "truncation_history", ["completed_at"])
    op.execute(_BACKFILL_HISTORY)


def downgrade() -> None:
    op.drop_index("truncation_history_by_time", table_name="truncation_history")
    op.drop_index("truncation_history_by_stream", table_name="truncation_history")
    op.drop_table("truncation_history")
    op.drop_column("transactions", "requested_at")
    previous = importlib.import_module("migrations.versions.0011_reporting")
    op.execute(previous._KEEP_DETAILS_FUNCTION)
    op.execute(previous._KEEP_DETAILS_TRIGGER)
