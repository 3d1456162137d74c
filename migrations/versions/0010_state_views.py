"""customized state views: participant states, aggregation config, aggregated views

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-21 18:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Every change to a participant's states leaves (state name, resource, partition) entries in the
# change log in the same transaction, however it was made (a report, a removal over REST, a
# segment store deregistered), and wakes the aggregator: one notification per statement, since
# NOTIFY folds identical payloads of one transaction. Transition tables allow one event per
# trigger, hence one trigger per event over the same function.
_STATE_TRIGGERS = [
    """CREATE FUNCTION pgc_log_state_changes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO state_changes (state_name, resource, partition)
    SELECT DISTINCT state_name, resource, partition FROM changed_rows;
    IF FOUND THEN
        PERFORM pg_notify('pgc_states', 'states');
    END IF;
    RETURN NULL;
END $$""",
    "CREATE TRIGGER participant_states_inserted AFTER INSERT ON participant_states "
    "REFERENCING NEW TABLE AS changed_rows FOR EACH STATEMENT EXECUTE FUNCTION pgc_log_state_changes()",
    "CREATE TRIGGER participant_states_deleted AFTER DELETE ON participant_states "
    "REFERENCING OLD TABLE AS changed_rows FOR EACH STATEMENT EXECUTE FUNCTION pgc_log_state_changes()",
    """CREATE FUNCTION pgc_notify_state_config() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('pgc_states', 'config');
    RETURN NULL;
END $$""",
    "CREATE TRIGGER state_view_config_notify AFTER UPDATE ON state_view_config "
    "FOR EACH STATEMENT EXECUTE FUNCTION pgc_notify_state_config()",
    # Listeners learn which view moved and to which version (`deleted` when it is gone). The
    # colon stands alone in its literal: SQLAlchemy's text() would read `:word` as a parameter.
    """CREATE FUNCTION pgc_notify_view() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('pgc_views', OLD.state_name || '/' || OLD.resource || ':' || 'deleted');
    ELSE
        PERFORM pg_notify('pgc_views', NEW.state_name || '/' || NEW.resource || ':' || NEW.version);
    END IF;
    RETURN NULL;
END $$""",
    "CREATE TRIGGER customized_views_notify AFTER INSERT OR UPDATE OR DELETE ON customized_views "
    "FOR EACH ROW EXECUTE FUNCTION pgc_notify_view()",
    # A deregistered segment store is a departed participant: its states go with it (the change
    # log then drops it from the views). Its participant id is how SegmentStoreHost prints.
    """CREATE FUNCTION pgc_forget_segment_store_states() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    gone text := CASE WHEN position(':' IN OLD.host) > 0
                    THEN '[' || OLD.host || ']:' || OLD.port
                    ELSE OLD.host || ':' || OLD.port END;
BEGIN
    DELETE FROM participant_resources WHERE participant = gone;
    DELETE FROM participant_states WHERE participant = gone;
    RETURN NULL;
END $$""",
    "CREATE TRIGGER segment_store_hosts_forget_states AFTER DELETE ON segment_store_hosts "
    "FOR EACH ROW EXECUTE FUNCTION pgc_forget_segment_store_states()",
]
_DROP_STATE_TRIGGERS = [
    "DROP TRIGGER IF EXISTS segment_store_hosts_forget_states ON segment_store_hosts",
    "DROP FUNCTION IF EXISTS pgc_forget_segment_store_states()",
    "DROP TRIGGER IF EXISTS customized_views_notify ON customized_views",
    "DROP FUNCTION IF EXISTS pgc_notify_view()",
    "DROP TRIGGER IF EXISTS state_view_config_notify ON state_view_config",
    "DROP FUNCTION IF EXISTS pgc_notify_state_config()",
    "DROP TRIGGER IF EXISTS participant_states_deleted ON participant_states",
    "DROP TRIGGER IF EXISTS participant_states_inserted ON participant_states",
    "DROP FUNCTION IF EXISTS pgc_log_state_changes()",
]


def upgrade() -> None:
    op.create_table(
        "participant_resources",
        sa.Column("participant", sa.Text(), nullable=False),
        sa.Column("state_name", sa.Text(), nullable=False),
        sa.Column("resource", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.PrimaryKeyConstraint("participant", "state_name", "resource", name="participant_resources_pkey"),
    )
    op.create_table(
        "participant_states",
        sa.Column("participant", sa.Text(), nullable=False),
        sa.Column("state_name", sa.Text(), nullable=False),
        sa.Column("resource", sa.Text(), nullable=False),
        sa.Column("partition", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "participant", "state_name", "resource", "partition", name="participant_states_pkey"
        ),
    )
    # Partition first: a statement about one participant's record can never be planned through
    # this index (it does not constrain the partition), even with statistics stale after a
    # bulk load, when a (state_name, resource) prefix looked as cheap as the primary key.
    op.create_index(
        "participant_states_by_partition",
        "participant_states",
        ["partition", "state_name", "resource"],
    )
    op.create_table(
        "state_changes",
        sa.Column("seq", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("state_name", sa.Text(), nullable=False),
        sa.Column("resource", sa.Text(), nullable=False),
        sa.Column("partition", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name="state_changes_pkey"),
    )
    op.create_table(
        "state_view_config",
        sa.Column("id", sa.SmallInteger(), nullable=False),
        sa.Column("state_names", ARRAY(sa.Text()), server_default=sa.text("'{}'"), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.CheckConstraint("id = 1", name="state_view_config_single_row"),
        sa.PrimaryKeyConstraint("id", name="state_view_config_pkey"),
    )
    op.create_table(
        "state_view_builds",
        sa.Column("state_name", sa.Text(), nullable=False),
        sa.Column("built_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("state_name", name="state_view_builds_pkey"),
    )
    op.execute(sa.schema.CreateSequence(sa.Sequence("customized_view_versions")))
    op.create_table(
        "customized_views",
        sa.Column("state_name", sa.Text(), nullable=False),
        sa.Column("resource", sa.Text(), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("state_name", "resource", name="customized_views_pkey"),
    )
    op.create_table(
        "customized_view_partitions",
        sa.Column("state_name", sa.Text(), nullable=False),
        sa.Column("resource", sa.Text(), nullable=False),
        sa.Column("partition", sa.Text(), nullable=False),
        sa.Column("states", JSONB(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "state_name", "resource", "partition", name="customized_view_partitions_pkey"
        ),
    )
    op.execute("INSERT INTO state_view_config (id) VALUES (1)")
    for statement in _STATE_TRIGGERS:
        op.execute(statement)


def downgrade() -> None:
    for statement in _DROP_STATE_TRIGGERS:
        op.execute(statement)
    op.drop_table("customized_view_partitions")
    op.drop_table("customized_views")
    op.execute(sa.schema.DropSequence(sa.Sequence("customized_view_versions")))
    op.drop_table("state_view_builds")
    op.drop_table("state_view_config")
    op.drop_table("state_changes")
    op.drop_index("participant_states_by_partition", table_name="participant_states")
    op.drop_table("participant_states")
    op.drop_table("participant_resources")
