-- Retention sets and subscribers. Each block's name is the store method that runs it.
--
-- A fenced write (the retention worker's) locks its bucket_owners row FOR SHARE: a claim that
-- bumps the generation waits for the write to commit, and a write that waited for a claim
-- re-reads the row, sees the new generation and writes nothing. `owned` tells that case apart.

-- name: list_members
-- One statement for every member of the asked buckets; the latest record time comes from the
-- retention set's key, so a pass with nothing due costs this statement alone.
SELECT s.scope, s.name, (s.name_hash & 2147483647) % $2::int AS bucket,
       (SELECT max(r.recording_time) FROM retention_set r WHERE r.stream_id = s.id) AS latest
FROM streams s
JOIN stream_configs c ON c.stream_id = s.id
JOIN stream_states st ON st.stream_id = s.id
WHERE c.retention_type IS NOT NULL
  AND s.scope <> '_system'
  AND st.state NOT IN ('CREATING', 'SEALING', 'SEALED')
  AND (s.name_hash & 2147483647) % $2::int = ANY($1::int[])
ORDER BY s.id;

-- name: get_context
SELECT st.state, c.retention_type, c.retention_param, c.retention_max, ce.epoch AS active_epoch,
       t.stream_cut, t.span, t.deleted_segments, t.to_delete, t.size_till, t.updating,
       t.version AS truncation_version,
       COALESCE((SELECT jsonb_agg(jsonb_build_array(r.recording_time, r.recording_size, r.stream_cut)
                                  ORDER BY r.recording_time)
                 FROM retention_set r WHERE r.stream_id = s.id), '[]'::jsonb) AS records,
       COALESCE((SELECT jsonb_agg(b.truncation_stream_cut ORDER BY b.subscriber)
                 FROM stream_subscribers b WHERE b.stream_id = s.id), '[]'::jsonb) AS subscriber_cuts
FROM streams s
JOIN stream_states st ON st.stream_id = s.id
JOIN stream_configs c ON c.stream_id = s.id
JOIN stream_current_epochs ce ON ce.stream_id = s.id
JOIN stream_truncations t ON t.stream_id = s.id
WHERE s.scope = $1 AND s.name = $2;

-- name: add_record
-- Appended only if newer than every record of the stream (the set stays ordered by time).
WITH fence AS (
    SELECT 1 FROM bucket_owners WHERE service = $3 AND bucket = $4 AND generation = $5 FOR SHARE
), target AS (
    SELECT id FROM streams WHERE scope = $1 AND name = $2
), added AS (
    INSERT INTO retention_set (stream_id, recording_time, recording_size, stream_cut)
    SELECT t.id, $6, $7, $8 FROM target t
    WHERE EXISTS (SELECT 1 FROM fence)
      AND NOT EXISTS (SELECT 1 FROM retention_set r WHERE r.stream_id = t.id AND r.recording_time >= $6)
    ON CONFLICT (stream_id, recording_time) DO NOTHING
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM target) AS stream_exists,
       EXISTS (SELECT 1 FROM fence) AS owned,
       EXISTS (SELECT 1 FROM added) AS written;

-- name: purge_records
WITH fence AS (
    SELECT 1 FROM bucket_owners WHERE service = $3 AND bucket = $4 AND generation = $5 FOR SHARE
), target AS (
    SELECT id FROM streams WHERE scope = $1 AND name = $2
), gone AS (
    DELETE FROM retention_set r USING target t
    WHERE r.stream_id = t.id AND r.recording_time <= $6 AND EXISTS (SELECT 1 FROM fence)
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM target) AS stream_exists,
       EXISTS (SELECT 1 FROM fence) AS owned,
       EXISTS (SELECT 1 FROM gone) AS written;

-- name: start_truncation
-- The same record the truncate API writes (sql/queries/streams.sql set_truncation), under the
-- fence; the caller inserts the truncate request in the same transaction.
WITH fence AS (
    SELECT 1 FROM bucket_owners WHERE service = $3 AND bucket = $4 AND generation = $5 FOR SHARE
), target AS (
    SELECT id FROM streams WHERE scope = $1 AND name = $2
), updated AS (
    UPDATE stream_truncations t SET stream_cut = $6, span = $7, deleted_segments = $8, to_delete = $9,
        size_till = $10, updating = $11, version = t.version + 1
    FROM target
    WHERE t.stream_id = target.id AND t.version = $12 AND EXISTS (SELECT 1 FROM fence)
    RETURNING t.version
)
SELECT EXISTS (SELECT 1 FROM target) AS stream_exists,
       EXISTS (SELECT 1 FROM fence) AS owned,
       (SELECT version FROM updated) AS version;

-- name: list_subscribers
-- No row: the stream is missing; one row with a NULL subscriber: it has none.
SELECT b.subscriber, b.reader_group_id, b.generation, b.truncation_stream_cut, b.update_time, b.version
FROM streams s LEFT JOIN stream_subscribers b ON b.stream_id = s.id
WHERE s.scope = $1 AND s.name = $2
ORDER BY b.subscriber;

-- name: get_subscriber
SELECT b.subscriber, b.reader_group_id, b.generation, b.truncation_stream_cut, b.update_time, b.version
FROM streams s LEFT JOIN stream_subscribers b ON b.stream_id = s.id AND b.subscriber = $3
WHERE s.scope = $1 AND s.name = $2;

-- name: insert_subscriber
WITH target AS (
    SELECT id FROM streams WHERE scope = $1 AND name = $2
), added AS (
    INSERT INTO stream_subscribers (stream_id, subscriber, reader_group_id, generation,
        truncation_stream_cut, update_time)
    SELECT id, $3, $4, $5, $6, $7 FROM target
    ON CONFLICT (stream_id, subscriber) DO NOTHING
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM target) AS stream_exists, EXISTS (SELECT 1 FROM added) AS written;

-- name: set_subscriber
UPDATE stream_subscribers b SET reader_group_id = $4, generation = $5, truncation_stream_cut = $6,
    update_time = $7, version = b.version + 1
FROM streams s
WHERE b.stream_id = s.id AND s.scope = $1 AND s.name = $2 AND b.subscriber = $3 AND b.version = $8
RETURNING b.version;

-- name: delete_subscriber
WITH target AS (
    SELECT id FROM streams WHERE scope = $1 AND name = $2
), gone AS (
    DELETE FROM stream_subscribers b USING target t
    WHERE b.stream_id = t.id AND b.subscriber = $3 AND b.version = $4
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM target) AS stream_exists,
       EXISTS (SELECT 1 FROM stream_subscribers b, target t
               WHERE b.stream_id = t.id AND b.subscriber = $3) AS present,
       EXISTS (SELECT 1 FROM gone) AS written;
