"""pgc_notify_request: the request's key (scope/stream) in its notification

A commit request is filed for every commitTransaction, and each one's NOTIFY made the commits
dispatcher read the queue, although the stream's run already in progress (or the one started
when it ends) commits everything pending on the stream: one query per transaction that found
nothing to start. With the key in the payload, a dispatcher that runs one request per key at a
time skips the read while that key is in its hands. The payload was "processor:bucket"; it is
now "processor:bucket:scope/stream", and a dispatcher still reads the queue on the old form.

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-30 07:20:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        """CREATE OR REPLACE FUNCTION pgc_notify_request() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(
        'pgc_requests', NEW.processor || ':' || NEW.bucket::text || ':' || NEW.scope || '/' || NEW.stream
    );
    RETURN NULL;
END $$"""
    )


def downgrade() -> None:
    op.execute(
        """CREATE OR REPLACE FUNCTION pgc_notify_request() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('pgc_requests', NEW.processor || ':' || NEW.bucket::text);
    RETURN NULL;
END $$"""
    )
