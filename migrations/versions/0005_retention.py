"""retention: stream-cut records, subscribers and their cuts

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-21 16:05:00.000000
"""

from collections.abc import Sequence

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
