"""reporting: the analyst role group and reporting-contract bookkeeping

What the `reporting` views (sql/reporting/*.sql, rebuilt after every migration run by
migrations/reporting.py) need and the base tables did not keep: the details of a completed
transaction (its active record is deleted when it completes), and an index for reading epochs
by time across streams. Also the NOLOGIN group every analyst role joins.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-21 18:11:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Roles are cluster-wide and many databases of one cluster may migrate at once (the test suite
# does): creation tolerates a role that exists or appears meanwhile. A migrating role without
# CREATEROLE skips it; `pgcontroller db create-analyst`, run by an administrator, creates it then.
_CREATE_GROUP = """DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pgc_analysts') THEN
        CREATE ROLE pgc_analysts NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
    END IF;
EXCEPTION
    WHEN duplicate_object OR unique_violation THEN NULL;
    WHEN insufficient_privilege THEN
        RAISE NOTICE 'pgc_analysts not created (no CREATEROLE); db create-analyst will create it';
END $$"""

# The active record of a transaction is deleted in the statement that writes its completed
# record; this keeps what analysts need from it (creation, lease, writer, when the commit or abort
# was requested) next to the completed record, and goes with it when that record is collected.
# The request time is the `created_at` of the commit/abort request filed with the status move
# (sql/queries/txns.sql move_txn): still queued while its completion runs, and on the
# controller's clock. The requests are grouped once and joined by hash (a per-row lookup made a
# 100-transaction batch quadratic), and matched as text so no payload can make a cast fail here.
# The lateral lookups are fenced (LIMIT, OFFSET 0) so they stay key lookups whatever the
# statistics say (on a young, unanalysed database the flattened joins scanned every completed
# record and every queued request per batch), and EXECUTE plans afresh each time instead of
# keeping a plan a session made when the tables were small.
# Only completions are kept: the join on the completed record skips rows removed any other way
# (a deleted stream cascades: its row is gone by then).
_KEEP_DETAILS_FUNCTION = """CREATE FUNCTION pgc_keep_completed_txn_details() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE $sql$
    INSERT INTO completed_txn_details (stream_id, txn_high, txn_low, epoch, creation_time, lease_ms,
        lease_expiry, max_exec_expiry, writer_id, commit_time, commit_order, requested_at)
    SELECT g.stream_id, g.txn_high, g.txn_low, g.epoch, g.creation_time, g.lease_ms, g.lease_expiry,
           g.max_exec_expiry, g.writer_id, g.commit_time, g.commit_order, rq.requested_at
    FROM gone g
    CROSS JOIN LATERAL (SELECT k.id FROM streams k WHERE k.id = g.stream_id LIMIT 1) s
    CROSS JOIN LATERAL (
        SELECT x.status FROM completed_txns x
        WHERE x.stream_id = g.stream_id AND x.txn_high = g.txn_high AND x.txn_low = g.txn_low
        LIMIT 1
    ) c
    LEFT JOIN (
        SELECT q.stream_id, r.processor, r.payload ->> 'txn_high' AS high,
               r.payload ->> 'txn_low' AS low, min(r.created_at) AS requested_at
        FROM (SELECT DISTINCT stream_id FROM gone) q
        CROSS JOIN LATERAL (SELECT k.scope, k.name FROM streams k WHERE k.id = q.stream_id LIMIT 1) k
        CROSS JOIN LATERAL (
            SELECT r.processor, r.payload, r.created_at FROM requests r
            WHERE r.scope = k.scope AND r.stream = k.name AND r.processor IN ('commits', 'aborts')
            OFFSET 0
        ) r
        GROUP BY 1, 2, 3, 4
    ) rq ON rq.stream_id = g.stream_id
        AND rq.processor = CASE g.status WHEN 'COMMITTING' THEN 'commits' ELSE 'aborts' END
        AND rq.high = g.txn_high::text AND rq.low = g.txn_low::text
    WHERE (g.status = 'COMMITTING' AND c.status = 'COMMITTED')
       OR (g.status = 'ABORTING' AND c.status = 'ABORTED')
    ON CONFLICT DO NOTHING
    $sql$;
    RETURN NULL;
END $$"""

# Statement level with a transition table: one insert per completion batch, not one per row.
_KEEP_DETAILS_TRIGGER = (
    "CREATE TRIGGER transactions_keep_details AFTER DELETE ON transactions "
    "REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION pgc_keep_completed_txn_details()"
)


def upgrade() -> None:
    op.execute(_CREATE_GROUP)
    op.create_table(
        "completed_txn_details",
        sa.Column("stream_id", sa.BigInteger(), nullable=False),
        sa.Column("txn_high", sa.BigInteger(), nullable=False),
        sa.Column("txn_low", sa.BigInteger(), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("creation_time", sa.BigInteger(), nullable=False),
        sa.Column("lease_ms", sa.BigInteger(), nullable=False),
        sa.Column("lease_expiry", sa.BigInteger(), nullable=False),
        sa.Column("max_exec_expiry", sa.BigInteger(), nullable=False),
        sa.Column("writer_id", sa.Text(), nullable=True),
        sa.Column("commit_time", sa.BigInteger(), nullable=True),
        sa.Column("commit_order", sa.BigInteger(), nullable=True),
        sa.Column("requested_at", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["stream_id", "txn_high", "txn_low"],
            ["completed_txns.stream_id", "completed_txns.txn_high", "completed_txns.txn_low"],
            ondelete="CASCADE",
            name="completed_txn_details_completed_fk",
        ),
        sa.PrimaryKeyConstraint("stream_id", "txn_high", "txn_low", name="completed_txn_details_pkey"),
    )
    op.execute(_KEEP_DETAILS_FUNCTION)
    op.execute(_KEEP_DETAILS_TRIGGER)
    # Incremental reads of scale events ("epochs created since T", over every stream).
    op.create_index("epochs_by_time", "epochs", ["creation_time"], unique=False)


def downgrade() -> None:
    # The group role stays: roles are cluster-wide, and other databases or analysts may use it.
    op.drop_index("epochs_by_time", table_name="epochs")
    op.execute("DROP TRIGGER IF EXISTS transactions_keep_details ON transactions")
    op.execute("DROP FUNCTION IF EXISTS pgc_keep_completed_txn_details()")
    op.drop_table("completed_txn_details")
