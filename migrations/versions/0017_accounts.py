"""accounts: the users `--auth-enabled` authenticates, with their ACLs

One row per account: its password hash (Argon2id; an account imported from Pravega's password
file keeps its PBKDF2 digest until its first successful login re-hashes it), its ACL in
Pravega's text form, and a version every write checks. A name holds no ':' (the separator of
Pravega's password file and of Basic credentials).

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-24 21:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "accounts",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("password_hash", sa.Text(), nullable=False),
        sa.Column("acl", sa.Text(), nullable=False, server_default=sa.text("''")),
        sa.Column("version", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="accounts_pkey"),
        sa.CheckConstraint("name <> '' AND strpos(name, ':') = 0", name="accounts_name_check"),
    )


def downgrade() -> None:
    op.drop_table("accounts")
