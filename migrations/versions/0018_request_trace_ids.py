"""request trace ids: the request id of the call that enqueued each request

A queued request keeps the id (Pravega's `requestId` tracing metadata, or one the controller
made) of the gRPC or REST call that enqueued it, so the workflow that runs it later, on any
controller, logs under that same id. Nullable: rows enqueued before this revision have none.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-24 22:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("requests", sa.Column("trace_id", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("requests", "trace_id")
