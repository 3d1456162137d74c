"""parked requests: a request that failed finally leaves its stream's queue but stays visible

- `requests.parked_at`: when the runner parked the request (its error is `last_error`). A parked
  row is skipped by every consumer, so the requests of its stream behind it run; it stays until
  an operator retries (un-parks) or drops it, and survives restarts like any row.
- `requests.failures`: failed attempts (postponements for a state transition are not counted),
  so an unexpectedly failing request can be parked after a bounded number of them.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-24 12:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("requests", sa.Column("parked_at", sa.BigInteger(), nullable=True))
    op.add_column(
        "requests", sa.Column("failures", sa.Integer(), server_default=sa.text("0"), nullable=False)
    )
    # The operator's list, and nothing more: parked rows are few.
    op.create_index("requests_parked", "requests", ["id"], postgresql_where=sa.text("parked_at IS NOT NULL"))


def downgrade() -> None:
    op.drop_index("requests_parked", table_name="requests")
    op.drop_column("requests", "failures")
    op.drop_column("requests", "parked_at")
