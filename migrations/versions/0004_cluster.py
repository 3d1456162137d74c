"""cluster: settings fixed for the cluster's life, controller membership, bucket owners with
generations, the leader record, segment-store hosts and the container map; stream name hashes

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-21 16:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Java's String.hashCode over UTF-16 code units, so retention and watermark buckets can be
# chosen in SQL exactly as Pravega's BucketStore chooses them ((hash & 0x7fffffff) % count).
_JAVA_HASH = """CREATE FUNCTION pgc_java_hash(s text) RETURNS integer
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    h bigint := 0;
    cp integer;
    ch text;
BEGIN
    FOREACH ch IN ARRAY regexp_split_to_array(s, '') LOOP
        cp := ascii(ch);
        IF cp > 65535 THEN
            h := (h * 31 + 55296 + ((cp - 65536) >> 10)) & 4294967295;
            h := (h * 31 + 56320 + ((cp - 65536) & 1023)) & 4294967295;
        ELSE
            h := (h * 31 + cp) & 4294967295;
        END IF;
    END LOOP;
    IF h >= 2147483648 THEN
        h := h - 4294967296;
    END IF;
    RETURN h::integer;
END $$"""

_NAME_HASH_TRIGGER = [
    """CREATE FUNCTION pgc_stream_name_hash() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.name_hash := pgc_java_hash(NEW.scope || '/' || NEW.name);
    RETURN NEW;
END $$""",
    "CREATE TRIGGER streams_name_hash BEFORE INSERT ON streams "
    "FOR EACH ROW EXECUTE FUNCTION pgc_stream_name_hash()",
]

# A request's bucket is decided by the database at insert, from the cluster's own count, so no
# process can ever file a request under a different bucket count than the others use.
_REQUEST_BUCKET = """CREATE FUNCTION pgc_request_bucket(scope text, stream text) RETURNS integer
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT (pgc_java_hash(scope || '/' || stream) & 2147483647) % request_buckets
    FROM cluster_settings WHERE id = 1
$$"""

# Ownership changes wake every process at once instead of at its next poll.
_NOTIFY = [
    """CREATE FUNCTION pgc_notify_cluster() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('pgc_cluster', TG_TABLE_NAME);
    RETURN NULL;
END $$""",
    "CREATE TRIGGER controllers_notify AFTER INSERT OR DELETE ON controllers "
    "FOR EACH STATEMENT EXECUTE FUNCTION pgc_notify_cluster()",
    "CREATE TRIGGER bucket_owners_notify AFTER INSERT OR UPDATE OF assigned_to ON bucket_owners "
    "FOR EACH STATEMENT EXECUTE FUNCTION pgc_notify_cluster()",
    "CREATE TRIGGER container_map_notify AFTER INSERT OR UPDATE OR DELETE ON container_map "
    "FOR EACH STATEMENT EXECUTE FUNCTION pgc_notify_cluster()",
    "CREATE TRIGGER segment_store_hosts_notify AFTER INSERT OR DELETE ON segment_store_hosts "
    "FOR EACH STATEMENT EXECUTE FUNCTION pgc_notify_cluster()",
]
_DROP_NOTIFY = [
    "DROP TRIGGER IF EXISTS segment_store_hosts_notify ON segment_store_hosts",
    "DROP TRIGGER IF EXISTS container_map_notify ON container_map",
    "DROP TRIGGER IF EXISTS bucket_owners_notify ON bucket_owners",
    "DROP TRIGGER IF EXISTS controllers_notify ON controllers",
    "DROP FUNCTION IF EXISTS pgc_notify_cluster()",
]


def upgrade() -> None:
    op.execute(_JAVA_HASH)
    op.add_column("streams", sa.Column("name_hash", sa.Integer(), nullable=True))
    op.execute("UPDATE streams SET name_hash = pgc_java_hash(scope || '/' || name)")
    op.alter_column("streams", "name_hash", nullable=False)
    for statement in _NAME_HASH_TRIGGER:
        op.execute(statement)
    op.create_table(
        "cluster_settings",
        sa.Column("id", sa.SmallInteger(), nullable=False),
        sa.Column("request_buckets", sa.Integer(), nullable=False),
        sa.Column("retention_buckets", sa.Integer(), nullable=False),
        sa.Column("watermark_buckets", sa.Integer(), nullable=False),
        sa.Column("container_count", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.CheckConstraint("id = 1", name="cluster_settings_single_row"),
        sa.CheckConstraint(
            "request_buckets > 0 AND retention_buckets > 0 AND watermark_buckets > 0 AND container_count > 0",
            name="cluster_settings_positive",
        ),
        sa.PrimaryKeyConstraint("id", name="cluster_settings_pkey"),
    )
    op.create_table(
        "controllers",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("host", sa.Text(), nullable=False),
        sa.Column("grpc_port", sa.Integer(), nullable=False),
        sa.Column("rest_port", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.BigInteger(), nullable=False),
        sa.Column("heartbeat_at", sa.BigInteger(), nullable=False),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.PrimaryKeyConstraint("id", name="controllers_pkey"),
    )
    op.create_table(
        "bucket_owners",
        sa.Column("service", sa.Text(), nullable=False),
        sa.Column("bucket", sa.Integer(), nullable=False),
        sa.Column("assigned_to", sa.Text(), nullable=True),
        sa.Column("owner", sa.Text(), nullable=True),
        sa.Column("generation", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("claimed_at", sa.BigInteger(), nullable=True),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.CheckConstraint(
            "service IN ('requests', 'retention', 'watermarks')", name="bucket_owners_service_check"
        ),
        sa.PrimaryKeyConstraint("service", "bucket", name="bucket_owners_pkey"),
    )
    op.create_table(
        "cluster_leader",
        sa.Column("id", sa.SmallInteger(), nullable=False),
        sa.Column("controller_id", sa.Text(), nullable=False),
        sa.Column("term", sa.BigInteger(), nullable=False),
        sa.Column("since", sa.BigInteger(), nullable=False),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.CheckConstraint("id = 1", name="cluster_leader_single_row"),
        sa.PrimaryKeyConstraint("id", name="cluster_leader_pkey"),
    )
    op.create_table(
        "segment_store_hosts",
        sa.Column("host", sa.Text(), nullable=False),
        sa.Column("port", sa.Integer(), nullable=False),
        sa.Column("registered_at", sa.BigInteger(), nullable=False),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.CheckConstraint("port > 0 AND port < 65536", name="segment_store_hosts_port_check"),
        sa.PrimaryKeyConstraint("host", "port", name="segment_store_hosts_pkey"),
    )
    op.create_table(
        "container_map",
        sa.Column("container", sa.Integer(), nullable=False),
        sa.Column("host", sa.Text(), nullable=False),
        sa.Column("port", sa.Integer(), nullable=False),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.PrimaryKeyConstraint("container", name="container_map_pkey"),
    )
    for statement in _NOTIFY:
        op.execute(statement)
    # Pravega's defaults; the first process may change them while the cluster holds no stream.
    op.execute(
        "INSERT INTO cluster_settings (id, request_buckets, retention_buckets, watermark_buckets, "
        "container_count, created_at) VALUES (1, 16, 1, 100, 4, "
        "(extract(epoch from clock_timestamp()) * 1000)::bigint)"
    )
    op.execute(_REQUEST_BUCKET)
    # Requests and transactions were bucketed by crc32 before; the Java hash replaces it.
    op.execute("UPDATE requests SET bucket = pgc_request_bucket(scope, stream)")
    op.execute(
        "UPDATE transactions t SET bucket = pgc_request_bucket(s.scope, s.name) FROM streams s WHERE s.id = t.stream_id"
    )


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS pgc_request_bucket(text, text)")
    for statement in _DROP_NOTIFY:
        op.execute(statement)
    op.drop_table("container_map")
    op.drop_table("segment_store_hosts")
    op.drop_table("cluster_leader")
    op.drop_table("bucket_owners")
    op.drop_table("controllers")
    op.drop_table("cluster_settings")
    op.execute("DROP TRIGGER IF EXISTS streams_name_hash ON streams")
    op.execute("DROP FUNCTION IF EXISTS pgc_stream_name_hash()")
    op.drop_column("streams", "name_hash")
    op.execute("DROP FUNCTION IF EXISTS pgc_java_hash(text)")
