"""The declared schema: SQLAlchemy Core metadata used by migrations and the drift test only.

Runtime queries live in sql/queries/*.sql. Every mutable table carries `version bigint`,
and every write to it is conditional on that version (see the set_* blocks in
sql/queries/streams.sql and PgStreamStore._conditional).
Immutable, insert-only tables (streams, epochs, retention set entries, tag index) carry no
version: nothing ever updates them.
"""

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Double,
    ForeignKey,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    Sequence,
    SmallInteger,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.dialects.postgresql import UUID as PgUUID

metadata = MetaData()

STREAM_STATES = (
    "UNKNOWN",
    "CREATING",
    "ACTIVE",
    "UPDATING",
    "SCALING",
    "COMMITTING_TXN",
    "TRUNCATING",
    "SEALING",
    "SEALED",
)


def _version() -> Column[int]:
    return Column("version", BigInteger, nullable=False, server_default=text("0"))


def _stream_fk() -> Column[int]:
    return Column("stream_id", BigInteger, ForeignKey("streams.id", ondelete="CASCADE"), primary_key=True)


scopes = Table(
    "scopes",
    metadata,
    Column("name", Text, primary_key=True),
    Column("state", Text, nullable=False, server_default=text("'ACTIVE'")),
    Column("created_at", BigInteger, nullable=False),
    _version(),
    CheckConstraint("state IN ('ACTIVE', 'DELETING')", name="scopes_state_check"),
)

streams = Table(
    "streams",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("scope", Text, ForeignKey("scopes.name"), nullable=False),
    Column("name", Text, nullable=False),
    Column("creation_time", BigInteger, nullable=False),
    # Java's hashCode of "scope/name", set by a trigger: retention and watermark buckets are
    # `(name_hash & 0x7fffffff) % count`, computable inside a query.
    Column("name_hash", Integer, nullable=False),
    UniqueConstraint("scope", "name", name="streams_scope_name_key"),
)

stream_configs = Table(
    "stream_configs",
    metadata,
    _stream_fk(),
    Column("scale_type", SmallInteger, nullable=False),
    Column("target_rate", Integer, nullable=False),
    Column("scale_factor", Integer, nullable=False),
    Column("min_num_segments", Integer, nullable=False),
    Column("retention_type", SmallInteger, nullable=True),
    Column("retention_param", BigInteger, nullable=False, server_default=text("0")),
    Column("retention_max", BigInteger, nullable=False, server_default=text("0")),
    Column("tags", ARRAY(Text), nullable=False, server_default=text("'{}'")),
    Column("timestamp_aggregation_timeout", BigInteger, nullable=False, server_default=text("0")),
    Column("rollover_size_bytes", BigInteger, nullable=False, server_default=text("0")),
    Column("updating", Boolean, nullable=False, server_default=text("false")),
    _version(),
)

stream_states = Table(
    "stream_states",
    metadata,
    _stream_fk(),
    Column("state", Text, nullable=False),
    _version(),
    CheckConstraint(
        "state IN (" + ", ".join(f"'{s}'" for s in STREAM_STATES) + ")", name="stream_states_state_check"
    ),
)

stream_current_epochs = Table(
    "stream_current_epochs",
    metadata,
    _stream_fk(),
    Column("epoch", Integer, nullable=False),
    _version(),
)

stream_truncations = Table(
    "stream_truncations",
    metadata,
    _stream_fk(),
    Column("stream_cut", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("span", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("deleted_segments", ARRAY(BigInteger), nullable=False, server_default=text("'{}'")),
    Column("to_delete", ARRAY(BigInteger), nullable=False, server_default=text("'{}'")),
    Column("size_till", BigInteger, nullable=False, server_default=text("0")),
    Column("updating", Boolean, nullable=False, server_default=text("false")),
    _version(),
)

# active_epoch = -1 is the empty record: no scale in flight.
stream_epoch_transitions = Table(
    "stream_epoch_transitions",
    metadata,
    _stream_fk(),
    Column("active_epoch", Integer, nullable=False, server_default=text("-1")),
    Column("time", BigInteger, nullable=False, server_default=text("0")),
    Column("segments_to_seal", ARRAY(BigInteger), nullable=False, server_default=text("'{}'")),
    Column("new_segment_ids", ARRAY(BigInteger), nullable=False, server_default=text("'{}'")),
    Column("new_key_starts", ARRAY(Double), nullable=False, server_default=text("'{}'")),
    Column("new_key_ends", ARRAY(Double), nullable=False, server_default=text("'{}'")),
    _version(),
)

# One immutable row per epoch: the epoch record and its history entry (PDP-32's history
# time series), indexed by creation time instead of a separate history time index.
epochs = Table(
    "epochs",
    metadata,
    Column("stream_id", BigInteger, ForeignKey("streams.id", ondelete="CASCADE"), nullable=False),
    Column("epoch", Integer, nullable=False),
    Column("reference_epoch", Integer, nullable=False),
    Column("creation_time", BigInteger, nullable=False),
    Column("splits", BigInteger, nullable=False, server_default=text("0")),
    Column("merges", BigInteger, nullable=False, server_default=text("0")),
    Column("segment_ids", ARRAY(BigInteger), nullable=False),
    Column("key_starts", ARRAY(Double), nullable=False),
    Column("key_ends", ARRAY(Double), nullable=False),
    Column("segment_creation_times", ARRAY(BigInteger), nullable=False),
    Column("sealed_segments", ARRAY(BigInteger), nullable=False, server_default=text("'{}'")),
    Column("created_segments", ARRAY(BigInteger), nullable=False, server_default=text("'{}'")),
    PrimaryKeyConstraint("stream_id", "epoch", name="epochs_pkey"),
    Index("epochs_by_creation_time", "stream_id", "creation_time"),
)

segments = Table(
    "segments",
    metadata,
    Column("stream_id", BigInteger, ForeignKey("streams.id", ondelete="CASCADE"), nullable=False),
    Column("segment_id", BigInteger, nullable=False),
    Column("number", Integer, nullable=False),
    Column("creation_epoch", Integer, nullable=False),
    Column("creation_time", BigInteger, nullable=False),
    Column("key_start", Double, nullable=False),
    Column("key_end", Double, nullable=False),
    Column("sealed_epoch", Integer, nullable=True),
    _version(),
    PrimaryKeyConstraint("stream_id", "segment_id", name="segments_pkey"),
    # reporting.segments's reads of one stream's segments created in a time window.
    Index("segments_by_creation_time", "stream_id", "creation_time"),
)

# Each stream's totals for reporting.streams, kept by statement triggers on segments and
# sealed_size_shards (migration 0019) in the writing transaction: counted once, never re-counted.
stream_report_totals = Table(
    "stream_report_totals",
    metadata,
    Column("stream_id", BigInteger, ForeignKey("streams.id", ondelete="CASCADE"), nullable=False),
    Column("segments_created", BigInteger, nullable=False, server_default=text("0")),
    Column("segments_sealed", BigInteger, nullable=False, server_default=text("0")),
    Column("sealed_bytes", BigInteger, nullable=False, server_default=text("0")),
    _version(),
    PrimaryKeyConstraint("stream_id"),
)

# Sealed sizes sharded by creation epoch (app.domain.records.SEALED_SIZE_SHARD_EPOCHS epochs a shard)
# so no row grows without bound.
sealed_size_shards = Table(
    "sealed_size_shards",
    metadata,
    Column("stream_id", BigInteger, ForeignKey("streams.id", ondelete="CASCADE"), nullable=False),
    Column("shard", Integer, nullable=False),
    Column("sizes", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    _version(),
    PrimaryKeyConstraint("stream_id", "shard", name="sealed_size_shards_pkey"),
)

retention_set = Table(
    "retention_set",
    metadata,
    Column("stream_id", BigInteger, ForeignKey("streams.id", ondelete="CASCADE"), nullable=False),
    Column("recording_time", BigInteger, nullable=False),
    Column("recording_size", BigInteger, nullable=False),
    Column("stream_cut", JSONB, nullable=False),
    PrimaryKeyConstraint("stream_id", "recording_time", name="retention_set_pkey"),
)

# Survives the stream: a re-created stream numbers its segments after the deleted one's.
deleted_streams = Table(
    "deleted_streams",
    metadata,
    Column("scope", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("last_segment_number", Integer, nullable=False),
    _version(),
    PrimaryKeyConstraint("scope", "name", name="deleted_streams_pkey"),
)

stream_tags = Table(
    "stream_tags",
    metadata,
    Column("scope", Text, nullable=False),
    Column("tag", Text, nullable=False),
    Column("stream", Text, nullable=False),
    Column("stream_id", BigInteger, nullable=False),
    PrimaryKeyConstraint("scope", "tag", "stream", name="stream_tags_pkey"),
    ForeignKeyConstraint(["stream_id"], ["streams.id"], ondelete="CASCADE", name="stream_tags_stream_fk"),
    Index("stream_tags_by_stream", "stream_id"),
)

# State of the embedded (simulated) segment store, shared by every controller process on
# this database; a real segment store keeps this state itself.
embedded_segments = Table(
    "embedded_segments",
    metadata,
    Column("name", Text, primary_key=True),
    Column("kind", Text, nullable=False),
    Column("length", BigInteger, nullable=False, server_default=text("0")),
    Column("start_offset", BigInteger, nullable=False, server_default=text("0")),
    Column("sealed", Boolean, nullable=False, server_default=text("false")),
    Column("scale_type", SmallInteger, nullable=False, server_default=text("0")),
    Column("target_rate", Integer, nullable=False, server_default=text("0")),
    Column("rollover_size_bytes", BigInteger, nullable=False, server_default=text("0")),
    Column("key_length", Integer, nullable=False, server_default=text("0")),
    Column("created_at", BigInteger, nullable=False),
    _version(),
    Column("last_modified", BigInteger, nullable=False, server_default=text("0")),
    CheckConstraint(
        "kind IN ('stream', 'transaction', 'table', 'transient')", name="embedded_segments_kind_check"
    ),
)


def _segment_fk(table: str) -> ForeignKeyConstraint:
    return ForeignKeyConstraint(
        ["segment"], ["embedded_segments.name"], name=f"{table}_segment_fkey", ondelete="CASCADE"
    )


# The embedded segment store's data (app/store/segment_data.py). Every row belongs to its
# segment (deleted with it). A stream segment's bytes: one row per append, keyed by its start
# offset; a merge renumbers the source's rows onto the target's end.
segment_chunks = Table(
    "segment_chunks",
    metadata,
    Column("segment", Text, nullable=False),
    Column("start_offset", BigInteger, nullable=False),
    Column("data", LargeBinary, nullable=False),
    _version(),
    # NULL: `data` holds the bytes as appended; else `data` is one LZ4 block of this many bytes
    # (app/store/chunk_packing.py).
    Column("lz4_length", Integer),
    _segment_fk("segment_chunks"),
    PrimaryKeyConstraint("segment", "start_offset", name="segment_chunks_pkey"),
    CheckConstraint("lz4_length > 0", name="segment_chunks_lz4_length_check"),
)

# The long-term tier's index (app/store/tiering.py): the bytes [start_offset, start_offset +
# length) of a segment are object `object` of the chunk store, moved there from segment_chunks by
# the storage writer; a merge renumbers them as it does segment_chunks. Deleting a row (a
# truncation, the segment's deletion) queues its object in tier_garbage (a trigger).
segment_tiered_chunks = Table(
    "segment_tiered_chunks",
    metadata,
    Column("segment", Text, nullable=False),
    Column("start_offset", BigInteger, nullable=False),
    Column("length", BigInteger, nullable=False),
    Column("object", Text, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    _version(),
    _segment_fk("segment_tiered_chunks"),
    PrimaryKeyConstraint("segment", "start_offset", name="segment_tiered_chunks_pkey"),
    UniqueConstraint("object", name="segment_tiered_chunks_object_key"),
    CheckConstraint("length > 0", name="segment_tiered_chunks_length_check"),
)

# Objects of the chunk store that nothing references (a chunk released, or one being written
# whose index row is not committed yet): the collector deletes them once `since` (stamped by the
# collector itself for released ones) is older than its grace, claiming the row first, so a
# storage writer can no longer commit a chunk the collector is deleting.
tier_garbage = Table(
    "tier_garbage",
    metadata,
    Column("object", Text, primary_key=True),
    Column("since", BigInteger, nullable=True),
    Column("claimed", Boolean, nullable=False, server_default=text("false")),
    _version(),
)

# A segment's attributes (absent = NULL_ATTRIBUTE_VALUE); `previous_value` is what the last
# update replaced, so an append learns the writer's previous event number in one statement.
segment_attributes = Table(
    "segment_attributes",
    metadata,
    Column("segment", Text, nullable=False),
    Column("attribute_id", PgUUID, nullable=False),
    Column("value", BigInteger, nullable=False),
    Column("previous_value", BigInteger, nullable=True),
    _version(),
    _segment_fk("segment_attributes"),
    PrimaryKeyConstraint("segment", "attribute_id", name="segment_attributes_pkey"),
)

# A table segment's live keys. `version` is the key's version: a position in the table, taken
# from the table's length (embedded_segments.length counts positions), strictly increasing.
table_entries = Table(
    "table_entries",
    metadata,
    Column("segment", Text, nullable=False),
    Column("key", LargeBinary, nullable=False),
    Column("value", LargeBinary, nullable=False),
    Column("version", BigInteger, nullable=False),
    _segment_fk("table_entries"),
    PrimaryKeyConstraint("segment", "key", name="table_entries_pkey"),
    Index("table_entries_by_version", "segment", "version"),
)

# The durable request queue (transactional outbox): a row is written in the same transaction
# as its operation's first metadata step and deleted only once its workflow completed.
requests = Table(
    "requests",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("processor", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("scope", Text, nullable=False),
    Column("stream", Text, nullable=False, server_default=text("''")),
    Column("bucket", Integer, nullable=False),
    Column("payload", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("created_at", BigInteger, nullable=False),
    Column("not_before", BigInteger, nullable=False, server_default=text("0")),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("started", Boolean, nullable=False, server_default=text("false")),
    Column("last_error", Text, nullable=True),
    _version(),
    # Parked: failed finally; skipped by the consumers until an operator retries or drops it.
    Column("parked_at", BigInteger, nullable=True),
    Column("failures", Integer, nullable=False, server_default=text("0")),
    # The request id of the call that enqueued it (Pravega's tracing id or one we made), so the
    # workflow's log lines can be found from the call's.
    Column("trace_id", Text, nullable=True),
    CheckConstraint("processor IN ('requests', 'commits', 'aborts')", name="requests_processor_check"),
    Index("requests_by_bucket", "processor", "bucket", "id"),
    Index("requests_by_key", "scope", "stream", "id"),
    Index("requests_parked", "id", postgresql_where=text("parked_at IS NOT NULL")),
    Index(
        "requests_pending_by_key",
        "processor",
        "scope",
        "stream",
        "id",
        postgresql_where=text("parked_at IS NULL"),
    ),
)

# Pravega's fairness barrier: while a processor waits for a state transition on a stream,
# other processors postpone that stream's requests that have not started yet.
stream_waiting_processors = Table(
    "stream_waiting_processors",
    metadata,
    _stream_fk(),
    Column("processor", Text, nullable=False),
    _version(),
)

# Active transactions (OPEN, COMMITTING, ABORTING). Expiry is an indexed column, not a timer:
# whoever owns the stream's request bucket aborts what expired, even after a crash.
transactions = Table(
    "transactions",
    metadata,
    Column("stream_id", BigInteger, ForeignKey("streams.id", ondelete="CASCADE"), nullable=False),
    Column("txn_high", BigInteger, nullable=False),
    Column("txn_low", BigInteger, nullable=False),
    Column("epoch", Integer, nullable=False),
    Column("bucket", Integer, nullable=False),
    Column("status", Text, nullable=False),
    Column("creation_time", BigInteger, nullable=False),
    Column("lease_ms", BigInteger, nullable=False),
    Column("lease_expiry", BigInteger, nullable=False),
    Column("max_exec_expiry", BigInteger, nullable=False),
    Column("writer_id", Text, nullable=True),
    Column("commit_time", BigInteger, nullable=True),
    Column("commit_order", BigInteger, nullable=True),
    # When the commit or abort was requested (the status move's time), for completed_txn_details.
    Column("requested_at", BigInteger, nullable=True),
    _version(),
    PrimaryKeyConstraint("stream_id", "txn_high", "txn_low", name="transactions_pkey"),
    CheckConstraint("status IN ('OPEN', 'COMMITTING', 'ABORTING')", name="transactions_status_check"),
    Index(
        "transactions_open_by_expiry",
        "bucket",
        "lease_expiry",
        postgresql_where=text("status = 'OPEN'"),
    ),
    Index(
        "transactions_committing",
        "stream_id",
        "epoch",
        "commit_order",
        postgresql_where=text("status = 'COMMITTING'"),
    ),
)

# The commit batch in progress (Pravega's committing-transactions record); epoch -1 = none.
# rolling_active_epoch is set once a batch has decided to roll (its epoch behind the active one),
# so a resumed batch rolls over the same epochs instead of deciding again against the moved pointer.
committing_txns = Table(
    "committing_txns",
    metadata,
    _stream_fk(),
    Column("epoch", Integer, nullable=False, server_default=text("-1")),
    Column("txn_highs", ARRAY(BigInteger), nullable=False, server_default=text("'{}'")),
    Column("txn_lows", ARRAY(BigInteger), nullable=False, server_default=text("'{}'")),
    Column("rolling_active_epoch", Integer, nullable=False, server_default=text("-1")),
    _version(),
)

# Insert-only outcome records; garbage-collected by age (kept between one and two TTLs).
completed_txns = Table(
    "completed_txns",
    metadata,
    Column("stream_id", BigInteger, ForeignKey("streams.id", ondelete="CASCADE"), nullable=False),
    Column("txn_high", BigInteger, nullable=False),
    Column("txn_low", BigInteger, nullable=False),
    Column("status", Text, nullable=False),
    Column("completion_time", BigInteger, nullable=False),
    PrimaryKeyConstraint("stream_id", "txn_high", "txn_low", name="completed_txns_pkey"),
    CheckConstraint("status IN ('COMMITTED', 'ABORTED')", name="completed_txns_status_check"),
    Index("completed_txns_by_time", "stream_id", "completion_time"),
    Index("completed_txns_for_gc", "completion_time"),
)

# Transaction ids come from one global counter (Pravega's 96-bit counter; 63 bits are plenty),
# commit order from another: both are shared by every controller process on the database.
txn_counter = Sequence("txn_counter", metadata=metadata)
txn_commit_order = Sequence("txn_commit_order", metadata=metadata)


# --- cluster (0004) -------------------------------------------------------------------------

# Written once by the first process; the counts are fixed for the cluster's life.
cluster_settings = Table(
    "cluster_settings",
    metadata,
    Column("id", SmallInteger, nullable=False),
    Column("request_buckets", Integer, nullable=False),
    Column("retention_buckets", Integer, nullable=False),
    Column("watermark_buckets", Integer, nullable=False),
    Column("container_count", Integer, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    _version(),
    CheckConstraint("id = 1", name="cluster_settings_single_row"),
    CheckConstraint(
        "request_buckets > 0 AND retention_buckets > 0 AND watermark_buckets > 0 AND container_count > 0",
        name="cluster_settings_positive",
    ),
    PrimaryKeyConstraint("id", name="cluster_settings_pkey"),
)

controllers = Table(
    "controllers",
    metadata,
    Column("id", Text, nullable=False),
    Column("host", Text, nullable=False),
    Column("grpc_port", Integer, nullable=False),
    Column("rest_port", Integer, nullable=False),
    Column("started_at", BigInteger, nullable=False),
    Column("heartbeat_at", BigInteger, nullable=False),
    _version(),
    PrimaryKeyConstraint("id", name="controllers_pkey"),
)

# `assigned_to` is the leader's decision; `owner` and `generation` are the claim of whoever
# holds the bucket's advisory lock. Every claim bumps the generation, which fences writes
# of any earlier holder.
bucket_owners = Table(
    "bucket_owners",
    metadata,
    Column("service", Text, nullable=False),
    Column("bucket", Integer, nullable=False),
    Column("assigned_to", Text, nullable=True),
    Column("owner", Text, nullable=True),
    Column("generation", BigInteger, nullable=False, server_default=text("0")),
    Column("claimed_at", BigInteger, nullable=True),
    _version(),
    CheckConstraint("service IN ('requests', 'retention', 'watermarks')", name="bucket_owners_service_check"),
    PrimaryKeyConstraint("service", "bucket", name="bucket_owners_pkey"),
)

cluster_leader = Table(
    "cluster_leader",
    metadata,
    Column("id", SmallInteger, nullable=False),
    Column("controller_id", Text, nullable=False),
    Column("term", BigInteger, nullable=False),
    Column("since", BigInteger, nullable=False),
    _version(),
    CheckConstraint("id = 1", name="cluster_leader_single_row"),
    PrimaryKeyConstraint("id", name="cluster_leader_pkey"),
)

segment_store_hosts = Table(
    "segment_store_hosts",
    metadata,
    Column("host", Text, nullable=False),
    Column("port", Integer, nullable=False),
    Column("registered_at", BigInteger, nullable=False),
    _version(),
    Column("heartbeat_at", BigInteger, nullable=True),
    CheckConstraint("port > 0 AND port < 65536", name="segment_store_hosts_port_check"),
    PrimaryKeyConstraint("host", "port", name="segment_store_hosts_pkey"),
)

container_map = Table(
    "container_map",
    metadata,
    Column("container", Integer, nullable=False),
    Column("host", Text, nullable=False),
    Column("port", Integer, nullable=False),
    _version(),
    PrimaryKeyConstraint("container", name="container_map_pkey"),
)


# --- watermarks (0006) ----------------------------------------------------------------------

# A writer's last report (noteTimestampFromWriter). `inactive_since` is when the watermark job first saw
# the writer not participating, so its timestampAggregationTimeout survives a bucket hand-over.
# A stream with at least one mark is a member of its watermark bucket; no marks, no member.
writer_marks = Table(
    "writer_marks",
    metadata,
    Column("stream_id", BigInteger, ForeignKey("streams.id", ondelete="CASCADE"), nullable=False),
    Column("writer", Text, nullable=False),
    Column("mark_time", BigInteger, nullable=False),
    Column("position", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("alive", Boolean, nullable=False, server_default=text("true")),
    Column("inactive_since", BigInteger, nullable=True),
    _version(),
    PrimaryKeyConstraint("stream_id", "writer", name="writer_marks_pkey"),
)

# Emitted watermarks (Pravega's revisioned `_MARK<stream>`): insert-only, numbered per stream;
# an append names the sequence number it follows, so two writers cannot both append after the
# same watermark. Only the most recent ones are kept (see sql/queries/watermarks.sql).
watermarks = Table(
    "watermarks",
    metadata,
    Column("stream_id", BigInteger, ForeignKey("streams.id", ondelete="CASCADE"), nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("lower_time_bound", BigInteger, nullable=False),
    Column("upper_time_bound", BigInteger, nullable=False),
    Column("stream_cut", JSONB, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    # The `_MARK<stream>` segment's length after this watermark's Event (0015); NULL before.
    Column("mark_offset", BigInteger, nullable=True),
    CheckConstraint("seq > 0", name="watermarks_seq_positive"),
    PrimaryKeyConstraint("stream_id", "seq", name="watermarks_pkey"),
)

# Auto-scaling (Pravega's AutoScaleTask): a DOWN report marks its segment cold until `until` (Long.MAX_VALUE
# for a silent one); a merge needs two cold neighbours. Rewritten under its version.
segment_cold_markers = Table(
    "segment_cold_markers",
    metadata,
    Column("stream_id", BigInteger, ForeignKey("streams.id", ondelete="CASCADE"), nullable=False),
    Column("segment_id", BigInteger, nullable=False),
    Column("until", BigInteger, nullable=False),
    _version(),
    PrimaryKeyConstraint("stream_id", "segment_id", name="segment_cold_markers_pkey"),
)


# --- retention (0005) -----------------------------------------------------------------------

from sqlalchemy.dialects.postgresql import UUID  # noqa: E402 - kept with the section that needs it

# Consumption-based retention: one row per reader group (with retention) subscribed to a stream,
# named "<rgScope>/<rgName>"; the rows of a stream are its subscriber set. A subscriber's cut
# only moves forward, each move conditional on the version read.
stream_subscribers = Table(
    "stream_subscribers",
    metadata,
    Column("stream_id", BigInteger, ForeignKey("streams.id", ondelete="CASCADE"), nullable=False),
    Column("subscriber", Text, nullable=False),
    Column("reader_group_id", UUID, nullable=False),
    Column("generation", BigInteger, nullable=False),
    Column("truncation_stream_cut", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("update_time", BigInteger, nullable=False),
    _version(),
    PrimaryKeyConstraint("stream_id", "subscriber", name="stream_subscribers_pkey"),
)


# --- key-value tables (0008) ----------------------------------------------------------------

KVT_STATES = ("CREATING", "ACTIVE", "DELETING")

# One row per key-value table, written with its CREATE_KVT request in one transaction.
# `id` names the incarnation; `start_number` is its safe starting segment number, fixed at
# insert from deleted_kvtables. The segments themselves are derived (app/domain/kvtables.py).
kvtables = Table(
    "kvtables",
    metadata,
    Column("scope", Text, ForeignKey("scopes.name"), nullable=False),
    Column("name", Text, nullable=False),
    Column("id", UUID, nullable=False),
    Column("partition_count", Integer, nullable=False),
    Column("primary_key_length", Integer, nullable=False),
    Column("secondary_key_length", Integer, nullable=False),
    Column("rollover_size_bytes", BigInteger, nullable=False),
    Column("start_number", Integer, nullable=False),
    Column("state", Text, nullable=False),
    Column("creation_time", BigInteger, nullable=False),
    _version(),
    PrimaryKeyConstraint("scope", "name", name="kvtables_pkey"),
    UniqueConstraint("id", name="kvtables_id_key"),
    CheckConstraint(
        "state IN (" + ", ".join(f"'{s}'" for s in KVT_STATES) + ")", name="kvtables_state_check"
    ),
    CheckConstraint(
        "partition_count > 0 AND primary_key_length > 0 AND secondary_key_length >= 0 "
        "AND rollover_size_bytes >= 0 AND start_number >= 0",
        name="kvtables_config_check",
    ),
)

# Survives the table (and its scope), as deleted_streams does: the highest segment number of
# the last deleted table of a name, so a re-created one numbers its segments after it.
deleted_kvtables = Table(
    "deleted_kvtables",
    metadata,
    Column("scope", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("last_segment_number", Integer, nullable=False),
    _version(),
    PrimaryKeyConstraint("scope", "name", name="deleted_kvtables_pkey"),
)


# --- reader groups (0009) -------------------------------------------------------------------

# A reader group, one row per (scope, name); the scope cannot be dropped while
# a group remains. `config` holds the group's settings and stream cuts as the API stored them;
# `generation` counts updates, `updating` marks one in progress. Every write is conditional on
# the version read.
reader_groups = Table(
    "reader_groups",
    metadata,
    Column("scope", Text, ForeignKey("scopes.name"), nullable=False),
    Column("name", Text, nullable=False),
    Column("id", UUID, nullable=False),
    Column("generation", BigInteger, nullable=False, server_default=text("0")),
    Column("state", Text, nullable=False),
    Column("config", JSONB, nullable=False),
    Column("updating", Boolean, nullable=False, server_default=text("false")),
    Column("created_at", BigInteger, nullable=False),
    _version(),
    CheckConstraint("state IN ('CREATING', 'ACTIVE', 'DELETING')", name="reader_groups_state_check"),
    CheckConstraint("generation >= 0", name="reader_groups_generation_check"),
    PrimaryKeyConstraint("scope", "name", name="reader_groups_pkey"),
)


# --- customized state views (0010) ----------------------------------------------------------

# A participant's report for one (state name, resource), Helix's CustomizedState znode: the
# version guards its partition rows, which are only ever inserted or deleted (a new state is a
# new row) in the transaction that moves this version. No partition left, no record.
participant_resources = Table(
    "participant_resources",
    metadata,
    Column("participant", Text, nullable=False),
    Column("state_name", Text, nullable=False),
    Column("resource", Text, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    _version(),
    PrimaryKeyConstraint("participant", "state_name", "resource", name="participant_resources_pkey"),
)

participant_states = Table(
    "participant_states",
    metadata,
    Column("participant", Text, nullable=False),
    Column("state_name", Text, nullable=False),
    Column("resource", Text, nullable=False),
    Column("partition", Text, nullable=False),
    Column("state", Text, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    PrimaryKeyConstraint(
        "participant", "state_name", "resource", "partition", name="participant_states_pkey"
    ),
    # Partition first, so no per-participant statement is ever planned through it.
    Index("participant_states_by_partition", "partition", "state_name", "resource"),
)

# Insert-only change log filled by triggers on participant_states; the aggregator deletes the
# entries it covered in the transaction that writes the views.
state_changes = Table(
    "state_changes",
    metadata,
    Column("seq", BigInteger, primary_key=True, autoincrement=True),
    Column("state_name", Text, nullable=False),
    Column("resource", Text, nullable=False),
    Column("partition", Text, nullable=False),
)

# Helix's CustomizedStateConfig: the state names aggregated into views (one row).
state_view_config = Table(
    "state_view_config",
    metadata,
    Column("id", SmallInteger, nullable=False),
    Column("state_names", ARRAY(Text), nullable=False, server_default=text("'{}'")),
    Column("updated_at", BigInteger, nullable=False, server_default=text("0")),
    _version(),
    CheckConstraint("id = 1", name="state_view_config_single_row"),
    PrimaryKeyConstraint("id", name="state_view_config_pkey"),
)

# The state names whose views the aggregator has built (inserted and deleted, never updated).
state_view_builds = Table(
    "state_view_builds",
    metadata,
    Column("state_name", Text, nullable=False),
    Column("built_at", BigInteger, nullable=False),
    PrimaryKeyConstraint("state_name", name="state_view_builds_pkey"),
)

# View versions come from one sequence, so a view removed and built again still moves forward.
customized_view_versions = Sequence("customized_view_versions", metadata=metadata)

customized_views = Table(
    "customized_views",
    metadata,
    Column("state_name", Text, nullable=False),
    Column("resource", Text, nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    PrimaryKeyConstraint("state_name", "resource", name="customized_views_pkey"),
)

# A view's partitions (participant -> state), rewritten as delete + insert under the view's
# version move, like participant_states under participant_resources.
customized_view_partitions = Table(
    "customized_view_partitions",
    metadata,
    Column("state_name", Text, nullable=False),
    Column("resource", Text, nullable=False),
    Column("partition", Text, nullable=False),
    Column("states", JSONB, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    PrimaryKeyConstraint("state_name", "resource", "partition", name="customized_view_partitions_pkey"),
)


# --- reporting (0011) -----------------------------------------------------------------------

# What a completed transaction's active record knew (creation, lease, writer, when its commit or
# abort was requested), written by the statement that deletes the record at completion
# (sql/queries/txns.sql), for the `reporting.transactions` view. Insert-only; it goes with its completed
# record (garbage collection, stream deletion).
completed_txn_details = Table(
    "completed_txn_details",
    metadata,
    Column("stream_id", BigInteger, nullable=False),
    Column("txn_high", BigInteger, nullable=False),
    Column("txn_low", BigInteger, nullable=False),
    Column("epoch", Integer, nullable=False),
    Column("creation_time", BigInteger, nullable=False),
    Column("lease_ms", BigInteger, nullable=False),
    Column("lease_expiry", BigInteger, nullable=False),
    Column("max_exec_expiry", BigInteger, nullable=False),
    Column("writer_id", Text, nullable=True),
    Column("commit_time", BigInteger, nullable=True),
    Column("commit_order", BigInteger, nullable=True),
    Column("requested_at", BigInteger, nullable=True),
    ForeignKeyConstraint(
        ["stream_id", "txn_high", "txn_low"],
        ["completed_txns.stream_id", "completed_txns.txn_high", "completed_txns.txn_low"],
        ondelete="CASCADE",
        name="completed_txn_details_completed_fk",
    ),
    PrimaryKeyConstraint("stream_id", "txn_high", "txn_low", name="completed_txn_details_pkey"),
)

# Epochs by time across streams: incremental reads of `reporting.scale_events`.
Index("epochs_by_time", epochs.c.creation_time)


# --- truncation history (0012) --------------------------------------------------------------

# One row per completed truncation, written with the completion of the stream's truncation
# record (which keeps only the latest): when, the cut, the bytes it removed and the running
# total, the segments it deleted. Insert-only.
truncation_history = Table(
    "truncation_history",
    metadata,
    Column("id", BigInteger, Identity(always=False), nullable=False),
    Column("stream_id", BigInteger, ForeignKey("streams.id", ondelete="CASCADE"), nullable=False),
    Column("completed_at", BigInteger, nullable=False),
    Column("stream_cut", JSONB, nullable=False),
    Column("truncated_bytes", BigInteger, nullable=False),
    Column("total_truncated_bytes", BigInteger, nullable=False),
    Column("deleted_segments", ARRAY(BigInteger), nullable=False),
    PrimaryKeyConstraint("id", name="truncation_history_pkey"),
    CheckConstraint("truncated_bytes >= 0", name="truncation_history_bytes_check"),
    Index("truncation_history_by_stream", "stream_id", "id"),
    Index("truncation_history_by_time", "completed_at"),
)


# --- accounts (0017) ------------------------------------------------------------------------

# The accounts `--auth-enabled` authenticates: the password's hash (Argon2id, or a Pravega
# PBKDF2 digest until its first successful login re-hashes it) and the ACL in Pravega's text.
accounts = Table(
    "accounts",
    metadata,
    Column("name", Text, nullable=False),
    Column("password_hash", Text, nullable=False),
    Column("acl", Text, nullable=False, server_default=text("''")),
    _version(),
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    PrimaryKeyConstraint("name", name="accounts_pkey"),
    CheckConstraint("name <> '' AND strpos(name, ':') = 0", name="accounts_name_check"),
)
