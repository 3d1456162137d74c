"""transactions: active and completed transaction records, the commit batch, id counters

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21 14:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Committing-record and active-transaction changes are stream changes too: the cache and
# anyone waiting on a stream hear about them through the same channel.
_CREATE_NOTIFY = [
    "CREATE TRIGGER committing_txns_notify AFTER UPDATE OR DELETE ON committing_txns "
    "FOR EACH ROW EXECUTE FUNCTION pgc_notify_stream_row()",
]
_DROP_NOTIFY = ["DROP TRIGGER IF EXISTS committing_txns_notify ON committing_txns"]


def upgrade() -> None:
    op.drop_constraint("requests_processor_check", "requests", type_="check")
    op.create_check_constraint(
        "requests_processor_check", "requests", "processor IN ('requests', 'commits', 'aborts')"
    )
    op.execute(sa.schema.CreateSequence(sa.Sequence("txn_counter")))
    op.execute(sa.schema.CreateSequence(sa.Sequence("txn_commit_order")))
    op.create_table(
        "transactions",
        sa.Column("stream_id", sa.BigInteger(), nullable=False),
        sa.Column("txn_high", sa.BigInteger(), nullable=False),
        sa.Column("txn_low", sa.BigInteger(), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("bucket", sa.Integer(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("creation_time", sa.BigInteger(), nullable=False),
        sa.Column("lease_ms", sa.BigInteger(), nullable=False),
        sa.Column("lease_expiry", sa.BigInteger(), nullable=False),
        sa.Column("max_exec_expiry", sa.BigInteger(), nullable=False),
        sa.Column("writer_id", sa.Text(), nullable=True),
        sa.Column("commit_time", sa.BigInteger(), nullable=True),
        sa.Column("commit_order", sa.BigInteger(), nullable=True),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.CheckConstraint("status IN ('OPEN', 'COMMITTING', 'ABORTING')", name="transactions_status_check"),
        sa.ForeignKeyConstraint(["stream_id"], ["streams.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("stream_id", "txn_high", "txn_low", name="transactions_pkey"),
    )
    op.create_index(
        "transactions_open_by_expiry",
        "transactions",
        ["bucket", "lease_expiry"],
        unique=False,
        postgresql_where=sa.text("status = 'OPEN'"),
    )
    op.create_index(
        "transactions_committing",
        "transactions",
        ["stream_id", "epoch", "commit_order"],
        unique=False,
        postgresql_where=sa.text("status = 'COMMITTING'"),
    )
    op.create_table(
        "committing_txns",
        sa.Column("stream_id", sa.BigInteger(), nullable=False),
        sa.Column("epoch", sa.Integer(), server_default=sa.text("-1"), nullable=False),
        sa.Column("txn_highs", sa.ARRAY(sa.BigInteger()), server_default=sa.text("'{}'"), nullable=False),
        sa.Column("txn_lows", sa.ARRAY(sa.BigInteger()), server_default=sa.text("'{}'"), nullable=False),
        sa.Column("rolling_active_epoch", sa.Integer(), server_default=sa.text("-1"), nullable=False),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.ForeignKeyConstraint(["stream_id"], ["streams.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("stream_id"),
    )
    op.create_table(
        "completed_txns",
        sa.Column("stream_id", sa.BigInteger(), nullable=False),
        sa.Column("txn_high", sa.BigInteger(), nullable=False),
        sa.Column("txn_low", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("completion_time", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("status IN ('COMMITTED', 'ABORTED')", name="completed_txns_status_check"),
        sa.ForeignKeyConstraint(["stream_id"], ["streams.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("stream_id", "txn_high", "txn_low", name="completed_txns_pkey"),
    )
    op.create_index(
        "completed_txns_by_time", "completed_txns", ["stream_id", "completion_time"], unique=False
    )
    op.create_index("completed_txns_for_gc", "completed_txns", ["completion_time"], unique=False)
    for statement in _CREATE_NOTIFY:
        op.execute(statement)


def downgrade() -> None:
    for statement in _DROP_NOTIFY:
        op.execute(statement)
    op.drop_index("completed_txns_for_gc", table_name="completed_txns")
    op.drop_index("completed_txns_by_time", table_name="completed_txns")
    op.drop_table("completed_txns")
    op.drop_table("committing_txns")
    op.drop_index("transactions_committing", table_name="transactions")
    op.drop_index("transactions_open_by_expiry", table_name="transactions")
    op.drop_table("transactions")
    op.execute(sa.schema.DropSequence(sa.Sequence("txn_commit_order")))
    op.execute(sa.schema.DropSequence(sa.Sequence("txn_counter")))
    op.drop_constraint("requests_processor_check", "requests", type_="check")
    op.create_check_constraint("requests_processor_check", "requests", "processor IN ('requests', 'commits')")
