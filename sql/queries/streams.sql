-- Streams and their per-stream records. Each block's name is the store method that runs it.

-- name: scope_state_for_share
SELECT state FROM scopes WHERE name = $1 FOR SHARE;

-- name: find_stream
SELECT s.id, s.creation_time, st.state, st.version AS state_version
FROM streams s JOIN stream_states st ON st.stream_id = s.id
WHERE s.scope = $1 AND s.name = $2;

-- name: last_deleted_segment_number
SELECT last_segment_number FROM deleted_streams WHERE scope = $1 AND name = $2;

-- name: insert_stream
INSERT INTO streams (scope, name, creation_time) VALUES ($1, $2, $3)
ON CONFLICT (scope, name) DO NOTHING
RETURNING id;

-- name: insert_stream_records
-- Every per-stream record starts at version 0 in the same statement, so a stream row never
-- exists without them.
WITH cfg AS (
    INSERT INTO stream_configs (stream_id, scale_type, target_rate, scale_factor, min_num_segments,
        retention_type, retention_param, retention_max, tags, timestamp_aggregation_timeout,
        rollover_size_bytes)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
), st AS (
    INSERT INTO stream_states (stream_id, state) VALUES ($1, 'CREATING')
), ce AS (
    INSERT INTO stream_current_epochs (stream_id, epoch) VALUES ($1, 0)
), tr AS (
    INSERT INTO stream_truncations (stream_id) VALUES ($1)
), etr AS (
    INSERT INTO stream_epoch_transitions (stream_id) VALUES ($1)
), ep AS (
    INSERT INTO epochs (stream_id, epoch, reference_epoch, creation_time, segment_ids, key_starts,
        key_ends, segment_creation_times, created_segments)
    VALUES ($1, 0, 0, $12, $13, $14, $15, $16, $13)
)
INSERT INTO segments (stream_id, segment_id, number, creation_epoch, creation_time, key_start, key_end)
SELECT $1, sid, (sid & 4294967295)::int, 0, ct, ks, ke
FROM unnest($13::bigint[], $14::float8[], $15::float8[], $16::bigint[]) AS u(sid, ks, ke, ct);

-- name: file_creation_finishers
-- A create request ($3) for each stream of buckets $2 left CREATING since before $1 and holding
-- none yet, except names starting with a prefix of $5: streams another workflow creates and
-- finishes (a mark stream by its stream, a reader group's state stream by the group's request).
-- The scan reads stream_states whole: cheap beside a creation, and no index serves it yet.
WITH filed AS (
    INSERT INTO requests (processor, kind, scope, stream, bucket, payload, created_at)
    SELECT 'requests', $3, s.scope, s.name, pgc_request_bucket(s.scope, s.name),
           jsonb_build_object('creation_time', s.creation_time), $4
    FROM stream_states st JOIN streams s ON s.id = st.stream_id
    WHERE st.state = 'CREATING' AND s.creation_time < $1
      AND NOT EXISTS (SELECT 1 FROM unnest($5::text[]) AS p(prefix) WHERE starts_with(s.name, p.prefix))
      AND pgc_request_bucket(s.scope, s.name) = ANY($2::int[])
      AND NOT EXISTS (SELECT 1 FROM requests r WHERE r.scope = s.scope AND r.stream = s.name AND r.kind = $3)
    RETURNING 1
)
SELECT count(*) FROM filed;

-- name: get_config
SELECT c.scale_type, c.target_rate, c.scale_factor, c.min_num_segments, c.retention_type,
       c.retention_param, c.retention_max, c.tags, c.timestamp_aggregation_timeout,
       c.rollover_size_bytes, c.updating, c.version
FROM streams s JOIN stream_configs c ON c.stream_id = s.id
WHERE s.scope = $1 AND s.name = $2;

-- name: get_configs
-- The configurations of the named streams ($2) of one scope: a listing's page in one query.
SELECT s.name, c.scale_type, c.target_rate, c.scale_factor, c.min_num_segments, c.retention_type,
       c.retention_param, c.retention_max, c.tags, c.timestamp_aggregation_timeout,
       c.rollover_size_bytes
FROM streams s JOIN stream_configs c ON c.stream_id = s.id
WHERE s.scope = $1 AND s.name = ANY($2::text[]);

-- name: set_config
UPDATE stream_configs c SET scale_type = $3, target_rate = $4, scale_factor = $5,
    min_num_segments = $6, retention_type = $7, retention_param = $8, retention_max = $9,
    tags = $10, timestamp_aggregation_timeout = $11, rollover_size_bytes = $12, updating = $13,
    version = c.version + 1
FROM streams s
WHERE c.stream_id = s.id AND s.scope = $1 AND s.name = $2 AND c.version = $14
RETURNING c.version;

-- name: get_state
SELECT st.state, st.version
FROM streams s JOIN stream_states st ON st.stream_id = s.id
WHERE s.scope = $1 AND s.name = $2;

-- name: set_state
UPDATE stream_states st SET state = $3, version = st.version + 1
FROM streams s
WHERE st.stream_id = s.id AND s.scope = $1 AND s.name = $2 AND st.version = $4
RETURNING st.version;

-- name: index_tags
INSERT INTO stream_tags (scope, tag, stream, stream_id)
SELECT s.scope, t, s.name, s.id
FROM streams s JOIN stream_configs c ON c.stream_id = s.id, unnest(c.tags) AS t
WHERE s.id = $1
ON CONFLICT DO NOTHING;

-- name: stream_exists
SELECT EXISTS (SELECT 1 FROM streams WHERE scope = $1 AND name = $2);

-- name: list_streams
SELECT EXISTS (SELECT 1 FROM scopes WHERE name = $1) AS scope_exists,
       ARRAY(SELECT name FROM streams WHERE scope = $1 AND name > $2 ORDER BY name LIMIT $3) AS names;

-- name: list_streams_for_tag
SELECT EXISTS (SELECT 1 FROM scopes WHERE name = $1) AS scope_exists,
       ARRAY(SELECT stream FROM stream_tags WHERE scope = $1 AND tag = $2 AND stream > $3
             ORDER BY stream LIMIT $4) AS names;

-- name: get_active_epoch
SELECT s.id AS stream_id, st.state, e.epoch, e.reference_epoch, e.creation_time, e.splits, e.merges, e.segment_ids,
       e.key_starts, e.key_ends, e.segment_creation_times
FROM streams s
JOIN stream_states st ON st.stream_id = s.id
JOIN stream_current_epochs ce ON ce.stream_id = s.id
JOIN epochs e ON e.stream_id = s.id AND e.epoch = ce.epoch
WHERE s.scope = $1 AND s.name = $2;

-- name: get_epoch
SELECT s.id AS stream_id, e.epoch, e.reference_epoch, e.creation_time, e.splits, e.merges, e.segment_ids,
       e.key_starts, e.key_ends, e.segment_creation_times
FROM streams s JOIN epochs e ON e.stream_id = s.id AND e.epoch = $3
WHERE s.scope = $1 AND s.name = $2;

-- name: get_head
SELECT t.stream_cut, e.segment_ids
FROM streams s
JOIN stream_truncations t ON t.stream_id = s.id
JOIN epochs e ON e.stream_id = s.id AND e.epoch = 0
WHERE s.scope = $1 AND s.name = $2;

-- name: get_current_epoch_pointer
SELECT ce.epoch, ce.version
FROM streams s JOIN stream_current_epochs ce ON ce.stream_id = s.id
WHERE s.scope = $1 AND s.name = $2;

-- name: set_current_epoch_pointer
UPDATE stream_current_epochs ce SET epoch = $3, version = ce.version + 1
FROM streams s
WHERE ce.stream_id = s.id AND s.scope = $1 AND s.name = $2 AND ce.version = $4
RETURNING ce.version;

-- name: get_truncation
SELECT t.stream_cut, t.span, t.deleted_segments, t.to_delete, t.size_till, t.updating, t.version
FROM streams s JOIN stream_truncations t ON t.stream_id = s.id
WHERE s.scope = $1 AND s.name = $2;

-- name: set_truncation
UPDATE stream_truncations t SET stream_cut = $3, span = $4, deleted_segments = $5, to_delete = $6,
    size_till = $7, updating = $8, version = t.version + 1
FROM streams s
WHERE t.stream_id = s.id AND s.scope = $1 AND s.name = $2 AND t.version = $9
RETURNING t.version;

-- name: complete_truncation
-- The truncation record written complete ($3-$8 as in set_truncation, at version $9) and the
-- truncation's history row in one statement: completed at $10, deleting $11. The bytes it
-- removed are the running total's growth since the stream's previous history row.
WITH done AS (
    UPDATE stream_truncations t SET stream_cut = $3, span = $4, deleted_segments = $5, to_delete = $6,
        size_till = $7, updating = $8, version = t.version + 1
    FROM streams s
    WHERE t.stream_id = s.id AND s.scope = $1 AND s.name = $2 AND t.version = $9
    RETURNING t.stream_id, t.stream_cut, t.size_till, t.version
), logged AS (
    INSERT INTO truncation_history (stream_id, completed_at, stream_cut, truncated_bytes,
        total_truncated_bytes, deleted_segments)
    SELECT d.stream_id, $10, d.stream_cut,
           d.size_till - COALESCE((
               SELECT h.total_truncated_bytes FROM truncation_history h
               WHERE h.stream_id = d.stream_id ORDER BY h.id DESC LIMIT 1
           ), 0),
           d.size_till, $11::bigint[]
    FROM done d
)
SELECT version FROM done;

-- name: get_epoch_transition
SELECT x.active_epoch, x.time, x.segments_to_seal, x.new_segment_ids, x.new_key_starts,
       x.new_key_ends, x.version
FROM streams s JOIN stream_epoch_transitions x ON x.stream_id = s.id
WHERE s.scope = $1 AND s.name = $2;

-- name: set_epoch_transition
UPDATE stream_epoch_transitions x SET active_epoch = $3, time = $4, segments_to_seal = $5,
    new_segment_ids = $6, new_key_starts = $7, new_key_ends = $8, version = x.version + 1
FROM streams s
WHERE x.stream_id = s.id AND s.scope = $1 AND s.name = $2 AND x.version = $9
RETURNING x.version;

-- name: get_segment
SELECT g.segment_id, g.number, g.creation_epoch, g.creation_time, g.key_start, g.key_end,
       g.sealed_epoch, g.version
FROM streams s JOIN segments g ON g.stream_id = s.id
WHERE s.scope = $1 AND s.name = $2 AND g.segment_id = $3;

-- name: set_segment_sealed_epoch
UPDATE segments g SET sealed_epoch = $4, version = g.version + 1
FROM streams s
WHERE g.stream_id = s.id AND s.scope = $1 AND s.name = $2 AND g.segment_id = $3 AND g.version = $5
RETURNING g.version;

-- name: get_sealed_size_shard
SELECT z.sizes, z.version
FROM streams s JOIN sealed_size_shards z ON z.stream_id = s.id
WHERE s.scope = $1 AND s.name = $2 AND z.shard = $3;

-- name: insert_sealed_size_shard
INSERT INTO sealed_size_shards (stream_id, shard, sizes)
SELECT s.id, $3, $4 FROM streams s WHERE s.scope = $1 AND s.name = $2
ON CONFLICT (stream_id, shard) DO NOTHING
RETURNING version;

-- name: set_sealed_size_shard
UPDATE sealed_size_shards z SET sizes = $4, version = z.version + 1
FROM streams s
WHERE z.stream_id = s.id AND s.scope = $1 AND s.name = $2 AND z.shard = $3 AND z.version = $5
RETURNING z.version;

-- name: get_deleted_stream
SELECT last_segment_number, version FROM deleted_streams WHERE scope = $1 AND name = $2;

-- name: insert_deleted_stream
INSERT INTO deleted_streams (scope, name, last_segment_number) VALUES ($1, $2, $3)
ON CONFLICT (scope, name) DO NOTHING
RETURNING version;

-- name: set_deleted_stream
UPDATE deleted_streams SET last_segment_number = $3, version = version + 1
WHERE scope = $1 AND name = $2 AND version = $4
RETURNING version;

-- name: get_epoch_range
-- One round trip whatever the history length: the (stream_id, epoch) key bounds the scan.
SELECT s.id AS stream_id, e.epoch, e.reference_epoch, e.creation_time, e.splits, e.merges,
       e.segment_ids, e.key_starts, e.key_ends, e.segment_creation_times
FROM streams s
LEFT JOIN epochs e ON e.stream_id = s.id AND e.epoch BETWEEN $3 AND $4
WHERE s.scope = $1 AND s.name = $2
ORDER BY e.epoch;

-- name: get_epochs_by_time
-- Epochs created in [from, to], plus the one in force at `from` (REST scaling events).
SELECT s.id AS stream_id, e.epoch, e.reference_epoch, e.creation_time, e.splits, e.merges,
       e.segment_ids, e.key_starts, e.key_ends, e.segment_creation_times
FROM streams s
LEFT JOIN LATERAL (
    (SELECT * FROM epochs x WHERE x.stream_id = s.id AND x.creation_time < $3
     ORDER BY x.creation_time DESC, x.epoch DESC LIMIT 1)
    UNION ALL
    (SELECT * FROM epochs x WHERE x.stream_id = s.id AND x.creation_time BETWEEN $3 AND $4
     ORDER BY x.creation_time, x.epoch LIMIT $5)
) e ON true
WHERE s.scope = $1 AND s.name = $2
ORDER BY e.epoch;

-- name: get_successors
-- The segment's sealed-in epoch E with the records of E and E-1, in one round trip.
-- BETWEEN, not IN: only a range on the second key column lets the (stream_id, epoch) key serve it.
-- LIMIT 2 bounds the planner's estimate: a range whose ends come from another row is guessed at
-- a ninth of the stream's epochs, and on a history of tens of millions that guess priced the
-- query past jit_above_cost, so every call spent seconds compiling what reads two rows.
SELECT s.id AS stream_id, g.sealed_epoch, e.epoch, e.reference_epoch, e.creation_time, e.splits,
       e.merges, e.segment_ids, e.key_starts, e.key_ends, e.segment_creation_times
FROM streams s
LEFT JOIN segments g ON g.stream_id = s.id AND g.segment_id = $3
LEFT JOIN LATERAL (
    SELECT x.epoch, x.reference_epoch, x.creation_time, x.splits, x.merges, x.segment_ids, x.key_starts,
           x.key_ends, x.segment_creation_times
    FROM epochs x
    WHERE x.stream_id = s.id AND g.sealed_epoch IS NOT NULL
      AND x.epoch BETWEEN g.sealed_epoch - 1 AND g.sealed_epoch
    ORDER BY x.epoch
    LIMIT 2
) e ON true
WHERE s.scope = $1 AND s.name = $2
ORDER BY e.epoch;

-- name: insert_epoch
-- A scale's new epoch: the epoch row, its new segments and the sealed-in epoch of the sealed
-- ones, in one statement. Re-running it after a crash changes nothing: inserts skip existing
-- rows and sealed_epoch is set only where still unset (a set-once field; its value is the guard).
-- A duplicate epoch ($16, a rolling transaction's copy) has empty history lists.
WITH target AS (SELECT id FROM streams WHERE scope = $1 AND name = $2),
ep AS (
    INSERT INTO epochs (stream_id, epoch, reference_epoch, creation_time, splits, merges, segment_ids,
        key_starts, key_ends, segment_creation_times, sealed_segments, created_segments)
    SELECT id, $3, $4, $5, $6, $7, $8, $9, $10, $11,
           CASE WHEN $16::boolean THEN '{}'::bigint[] ELSE $12::bigint[] END,
           CASE WHEN $16::boolean THEN '{}'::bigint[] ELSE $13::bigint[] END
    FROM target
    ON CONFLICT (stream_id, epoch) DO NOTHING
), seg AS (
    INSERT INTO segments (stream_id, segment_id, number, creation_epoch, creation_time, key_start, key_end)
    SELECT t.id, u.sid, (u.sid & 4294967295)::int, (u.sid >> 32)::int, $5, u.ks, u.ke
    FROM target t, unnest($13::bigint[], $14::float8[], $15::float8[]) AS u(sid, ks, ke)
    ON CONFLICT (stream_id, segment_id) DO NOTHING
), sealed AS (
    UPDATE segments g SET sealed_epoch = $3, version = g.version + 1
    FROM target t
    WHERE g.stream_id = t.id AND g.segment_id = ANY($12::bigint[]) AND g.sealed_epoch IS NULL
)
SELECT count(*) FROM target;

-- name: all_segment_ids
SELECT g.segment_id FROM streams s JOIN segments g ON g.stream_id = s.id
WHERE s.scope = $1 AND s.name = $2;

-- name: delete_stream
-- Removes the stream and, by cascade, every per-stream record and its tag index entries. The
-- deleted-stream record only ever grows (GREATEST), so a re-created stream never reuses a
-- segment number the segment store may still be deleting.
WITH target AS (
    SELECT id FROM streams WHERE scope = $1 AND name = $2 AND ($3::bigint = 0 OR creation_time = $3)
), highest AS (
    SELECT max(g.number) AS number FROM segments g JOIN target t ON g.stream_id = t.id
), rec AS (
    INSERT INTO deleted_streams (scope, name, last_segment_number)
    SELECT $1, $2, h.number FROM highest h WHERE h.number IS NOT NULL
    ON CONFLICT (scope, name) DO UPDATE
    SET last_segment_number = GREATEST(deleted_streams.last_segment_number, EXCLUDED.last_segment_number),
        version = deleted_streams.version + 1
), gone AS (
    DELETE FROM streams s USING target t WHERE s.id = t.id RETURNING s.id
)
SELECT count(*) FROM gone;

-- name: get_creation_time
SELECT creation_time FROM streams WHERE scope = $1 AND name = $2;

-- name: reindex_tags
WITH target AS (
    SELECT s.id, s.scope, s.name, c.tags
    FROM streams s JOIN stream_configs c ON c.stream_id = s.id
    WHERE s.scope = $1 AND s.name = $2
), gone AS (
    DELETE FROM stream_tags t USING target WHERE t.stream_id = target.id AND NOT (t.tag = ANY(target.tags))
)
INSERT INTO stream_tags (scope, tag, stream, stream_id)
SELECT target.scope, tag, target.name, target.id FROM target, unnest(target.tags) AS tag
ON CONFLICT DO NOTHING;
