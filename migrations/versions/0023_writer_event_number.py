"""pgc_writer_event_number: a writer's event number on a segment, after every append in flight on it

A store answers SetupAppend with the writer's last stored event number, read once every
transaction still appending to the segment has ended (any store's, even one whose process died
while committing). That took a transaction of two statements (a share lock on the segment's row,
which waits for them, then the read in a snapshot taken after it): four round trips with BEGIN and
COMMIT, for every writer set up, one per Pravega transaction. A volatile PL/pgSQL function takes a
fresh snapshot for each statement it runs, so the same two steps are one call; and as the lock
is all the call writes, its commit does not wait for a WAL flush (a crash can lose nothing of it).

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-30 04:30:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        """CREATE FUNCTION pgc_writer_event_number(
            segment_name text, writer uuid, OUT segment_found boolean, OUT event_number bigint
        ) LANGUAGE plpgsql VOLATILE AS $$
        BEGIN
            -- The share lock is all this transaction writes: its commit has nothing to keep, so
            -- it need not wait for a WAL flush.
            PERFORM set_config('synchronous_commit', 'off', true);
            PERFORM 1 FROM embedded_segments s WHERE s.name = segment_name FOR SHARE;
            segment_found := FOUND;
            IF segment_found THEN
                SELECT a.value INTO event_number FROM segment_attributes a
                WHERE a.segment = segment_name AND a.attribute_id = writer;
            END IF;
        END $$"""
    )


def downgrade() -> None:
    op.execute("DROP FUNCTION pgc_writer_event_number(text, uuid)")
