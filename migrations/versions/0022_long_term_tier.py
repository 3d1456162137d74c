"""the long-term storage tier's index: tiered chunks and the garbage queue of their objects

segment_tiered_chunks maps a segment's byte ranges to objects of the chunk store (a filesystem or
S3-compatible storage), which the storage writer fills from segment_chunks; tier_garbage lists the
objects nothing references. A trigger queues a tiered chunk's object when its row is deleted, so a
truncation, a segment's deletion and the cascade from it all release their objects without each
statement having to.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-29 09:00:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE segment_tiered_chunks (
            segment text NOT NULL,
            start_offset bigint NOT NULL,
            length bigint NOT NULL,
            object text NOT NULL,
            created_at bigint NOT NULL,
            version bigint NOT NULL DEFAULT 0,
            CONSTRAINT segment_tiered_chunks_pkey PRIMARY KEY (segment, start_offset),
            CONSTRAINT segment_tiered_chunks_object_key UNIQUE (object),
            CONSTRAINT segment_tiered_chunks_length_check CHECK (length > 0),
            CONSTRAINT segment_tiered_chunks_segment_fkey FOREIGN KEY (segment)
                REFERENCES embedded_segments (name) ON DELETE CASCADE
        )
        """
    )
    op.execute(
        """
        CREATE TABLE tier_garbage (
            object text PRIMARY KEY,
            since bigint,
            claimed boolean NOT NULL DEFAULT false,
            version bigint NOT NULL DEFAULT 0
        )
        """
    )
    op.execute(
        """CREATE FUNCTION pgc_tier_release() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO tier_garbage (object) VALUES (OLD.object) ON CONFLICT (object) DO NOTHING;
            RETURN NULL;
        END $$"""
    )
    op.execute(
        """CREATE TRIGGER segment_tiered_chunks_release AFTER DELETE ON segment_tiered_chunks
        FOR EACH ROW EXECUTE FUNCTION pgc_tier_release()"""
    )


def downgrade() -> None:
    op.execute("DROP TABLE segment_tiered_chunks")
    op.execute("DROP FUNCTION pgc_tier_release()")
    op.execute("DROP TABLE tier_garbage")
