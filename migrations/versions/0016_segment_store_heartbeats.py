"""segment-store heartbeats: `segment_store_hosts.heartbeat_at`

Milliseconds of a segment store's last heartbeat (`pgcontroller segment-store` and the embedded
store of `serve` write it every heartbeat period). The leader removes a host whose heartbeat is
older than the expiry, so its containers move. NULL: registered by an operator over REST, which
never heartbeats and is never expired (it stays until deleted, as before).

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-24 20:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("segment_store_hosts", sa.Column("heartbeat_at", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    op.drop_column("segment_store_hosts", "heartbeat_at")
