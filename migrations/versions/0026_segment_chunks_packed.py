"""segment chunks packed by the store: lz4 in pgcontroller, not in TOAST

`segment_chunks.lz4_length`: NULL for a chunk whose `data` holds its bytes as they were appended,
else `data` is one LZ4 block of that many bytes (app/store/chunk_packing.py says when and why).
`data` is stored out of line uncompressed from now (STORAGE EXTERNAL), as the store has already
compressed what compresses; rows written before keep their storage (PostgreSQL's lz4 TOAST, undone
transparently on reading) and their NULL.

The downgrade unpacks the packed rows in place, a page of rows at a time, after setting the storage
of 0021 back, so PostgreSQL compresses them again as it stores them.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-02 06:40:00.000000
"""

from collections.abc import Sequence

import lz4.block
from alembic import op
from sqlalchemy import text

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_PAGE = 64


def upgrade() -> None:
    op.execute("ALTER TABLE segment_chunks ADD COLUMN lz4_length integer")
    op.execute(
        "ALTER TABLE segment_chunks ADD CONSTRAINT segment_chunks_lz4_length_check CHECK (lz4_length > 0)"
    )
    op.execute("ALTER TABLE segment_chunks ALTER COLUMN data SET STORAGE EXTERNAL")


def downgrade() -> None:
    op.execute("ALTER TABLE segment_chunks ALTER COLUMN data SET STORAGE EXTENDED")
    bind = op.get_bind()
    after: tuple[str, int] = ("", -1)
    while True:
        rows = bind.execute(
            text(
                "SELECT segment, start_offset, data, lz4_length FROM segment_chunks"
                " WHERE lz4_length IS NOT NULL AND (segment, start_offset) > (:segment, :start)"
                " ORDER BY segment, start_offset LIMIT :page"
            ),
            {"segment": after[0], "start": after[1], "page": _PAGE},
        ).all()
        if not rows:
            break
        for segment, start, data, size in rows:
            bind.execute(
                text(
                    "UPDATE segment_chunks SET data = :data, lz4_length = NULL, version = version + 1"
                    " WHERE segment = :segment AND start_offset = :start"
                ),
                {
                    "data": lz4.block.decompress(data, uncompressed_size=size),
                    "segment": segment,
                    "start": start,
                },
            )
        after = (rows[-1][0], rows[-1][1])
    op.execute("ALTER TABLE segment_chunks DROP COLUMN lz4_length")
