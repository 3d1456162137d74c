"""requests: the durable request queue, the fairness barrier and change notifications

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21 10:05:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Triggers, not store code, send the notifications: no write path can forget one, and
# pg_notify is transactional, so listeners only hear about committed changes.
_CREATE_NOTIFY = [
    """CREATE FUNCTION pgc_notify_request() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('pgc_requests', NEW.processor || ':' || NEW.bucket::text);
    RETURN NULL;
END $$""",
    """CREATE FUNCTION pgc_notify_stream_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('pgc_streams', OLD.stream_id::text);
    ELSE
        PERFORM pg_notify('pgc_streams', NEW.stream_id::text);
    END IF;
    RETURN NULL;
END $$""",
    """CREATE FUNCTION pgc_notify_stream_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('pgc_streams', OLD.id::text);
    RETURN NULL;
END $$""",
    "CREATE TRIGGER requests_notify AFTER INSERT ON requests "
    "FOR EACH ROW EXECUTE FUNCTION pgc_notify_request()",
    "CREATE TRIGGER stream_states_notify AFTER UPDATE OR DELETE ON stream_states "
    "FOR EACH ROW EXECUTE FUNCTION pgc_notify_stream_row()",
    "CREATE TRIGGER stream_current_epochs_notify AFTER UPDATE OR DELETE ON stream_current_epochs "
    "FOR EACH ROW EXECUTE FUNCTION pgc_notify_stream_row()",
    "CREATE TRIGGER streams_notify AFTER DELETE ON streams "
    "FOR EACH ROW EXECUTE FUNCTION pgc_notify_stream_deleted()",
]

_DROP_NOTIFY = [
    "DROP TRIGGER IF EXISTS streams_notify ON streams",
    "DROP TRIGGER IF EXISTS stream_current_epochs_notify ON stream_current_epochs",
    "DROP TRIGGER IF EXISTS stream_states_notify ON stream_states",
    "DROP TRIGGER IF EXISTS requests_notify ON requests",
    "DROP FUNCTION IF EXISTS pgc_notify_stream_deleted()",
    "DROP FUNCTION IF EXISTS pgc_notify_stream_row()",
    "DROP FUNCTION IF EXISTS pgc_notify_request()",
]


def upgrade() -> None:
    op.create_table(
        "requests",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("processor", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("stream", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("bucket", sa.Integer(), nullable=False),
        sa.Column(
            "payload",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("not_before", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("started", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.CheckConstraint("processor IN ('requests', 'commits')", name="requests_processor_check"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("requests_by_bucket", "requests", ["processor", "bucket", "id"], unique=False)
    op.create_index("requests_by_key", "requests", ["scope", "stream", "id"], unique=False)
    op.create_table(
        "stream_waiting_processors",
        sa.Column("stream_id", sa.BigInteger(), nullable=False),
        sa.Column("processor", sa.Text(), nullable=False),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.ForeignKeyConstraint(["stream_id"], ["streams.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("stream_id"),
    )
    # One statement per execute: asyncpg prepares each, and a prepared statement holds one.
    for statement in _CREATE_NOTIFY:
        op.execute(statement)


def downgrade() -> None:
    for statement in _DROP_NOTIFY:
        op.execute(statement)
    op.drop_table("stream_waiting_processors")
    op.drop_index("requests_by_key", table_name="requests")
    op.drop_index("requests_by_bucket", table_name="requests")
    op.drop_table("requests")
