"""segment_chunks.segment, segment_tiered_chunks.segment: n_distinct = -0.1 for the planner

Most chunk rows belong to a few stream segments, so ANALYZE finds few distinct values in the
`segment` column, and the planner prices "the chunks of a segment it cannot see" (a generic
plan's parameter, a join with a list of merge sources) as a large share of the table. A
transaction's merge (sql/queries/segment_data.sql `merge_apply`, `merges_apply`) then hashed
its sources and read every chunk row of every segment, dead ones too, once per commit (0.45 ms
at 2,600 rows, 1.2 ms at 6,800, and on with the table), where its sources own one or two rows.
The other statements on these tables read one segment's rows by the primary key's prefix, or
all rows at once (the storage writer's backlog, where the estimate only sizes the grouping), so
an estimate of ten rows per segment leaves their plans as they are. The option takes effect at
the table's next ANALYZE, run here and by autovacuum; the merge statements also filter on the
column, for the time before that.

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-30 16:20:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLES = ("segment_chunks", "segment_tiered_chunks")


def upgrade() -> None:
    for table in _TABLES:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN segment SET (n_distinct = -0.1)")
        op.execute(f"ANALYZE {table}")


def downgrade() -> None:
    for table in _TABLES:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN segment RESET (n_distinct)")
        op.execute(f"ANALYZE {table}")
