"""watermark mark offsets: where each emitted watermark ends in its stream's `_MARK` segment

- `watermarks.mark_offset`: the `_MARK<stream>` segment's length once this watermark's Event was
  appended there (Pravega's revision of the entry). The next watermark is appended conditionally
  at exactly this offset, so a watermark is never appended twice and never after a stale one.
  NULL for rows written before watermarks went to the segment.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-24 20:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("watermarks", sa.Column("mark_offset", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    op.drop_column("watermarks", "mark_offset")
