"""segment chunks compressed with lz4: an append's bytes are TOASTed compressed when they compress

An append block of 1 MiB is stored out of line in about 500 TOAST rows of 2 KB, each with its
index entry and WAL; that was most of PostgreSQL's cost per byte appended (about 5 ms of CPU per
MB). With lz4 (PostgreSQL 14+, built into Debian's 15), bytes that compress are stored in a
fraction of those rows (1 KiB events padded with text: 0.48 ms per MB where uncompressed took
2.1-2.4), and bytes that do not are stored as before: PostgreSQL keeps a value uncompressed when
compressing it does not save space, and lz4 finds that out at about the cost of a copy. Rows
written before keep their storage; a read decompresses a compressed chunk whole (lz4 decodes
several GB/s), where an uncompressed one could be sliced.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-29 03:45:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("ALTER TABLE segment_chunks ALTER COLUMN data SET STORAGE EXTENDED")
    op.execute("ALTER TABLE segment_chunks ALTER COLUMN data SET COMPRESSION lz4")


def downgrade() -> None:
    op.execute("ALTER TABLE segment_chunks ALTER COLUMN data SET COMPRESSION DEFAULT")
    op.execute("ALTER TABLE segment_chunks ALTER COLUMN data SET STORAGE EXTERNAL")
