-- The history generator (`pgcontroller dev seed`, app/dev/seed.py). The bulk rows go in with
-- COPY; these are the reads and reservations around it. Each block's name is the method running it.

-- name: request_buckets
SELECT request_buckets FROM cluster_settings WHERE id = 1;

-- name: existing_streams
SELECT s.scope, s.name
FROM streams s
JOIN unnest($1::text[], $2::text[]) AS wanted(scope, name) ON wanted.scope = s.scope AND wanted.name = s.name;

-- name: deleted_numbers
-- A re-created name numbers its segments after the deleted stream's (its last number + 1).
SELECT d.scope, d.name, d.last_segment_number
FROM deleted_streams d
JOIN unnest($1::text[], $2::text[]) AS wanted(scope, name) ON wanted.scope = d.scope AND wanted.name = d.name;

-- name: scope_states
SELECT name, state FROM scopes WHERE name = ANY($1::text[]);

-- name: insert_scopes
INSERT INTO scopes (name, created_at)
SELECT n, $2::bigint FROM unnest($1::text[]) AS n
ON CONFLICT (name) DO NOTHING;

-- name: reserve_stream_ids
-- Ids from the column's own sequence, so streams created later through the API never collide.
SELECT nextval(pg_get_serial_sequence('streams', 'id')) AS id FROM generate_series(1, $1::int);

-- name: reserve_txn_numbers
-- Transaction ids come from the one global counter (the txn id's low bits), as createTransaction takes
-- them; commit orders from the sequence the moves to COMMITTING take them from, so that commits
-- made later by a running controller come after the seeded ones.
SELECT ARRAY(SELECT nextval('txn_counter') FROM generate_series(1, $1::int)) AS counters,
       ARRAY(SELECT nextval('txn_commit_order') FROM generate_series(1, $2::int)) AS commit_orders;

-- name: analyze_tables
-- A long-lived database would have been analysed by now; benchmarks need the planner to know.
ANALYZE streams, epochs, segments, sealed_size_shards, retention_set, truncation_history, completed_txns,
    completed_txn_details, transactions;

-- The one long stream (`dev seed --one-stream-epochs`, app/dev/long_history.py), grown inside
-- PostgreSQL. Epoch e >= 1 seals one of the two active segments and creates one of the same key
-- range (side (e - 1) % 2: 0 the low range, 1 the high), numbered one above every number before,
-- at creation time t0 + e * step. So the active set of epoch e >= 2 is {new(e - 1), new(e)} and
-- new(e) is sealed in epoch e + 2. Rows are those the scale's insert_epoch statement writes:
-- an epoch's segments in key order; splits and merges stay 0 (a one-for-one scale spreads no
-- range). Parameters: $1 stream id, $2/$3 first/last epoch of the chunk, $4 t0,
-- $5 step, $6 low id, $7 high id, $8 first number (one above both), then as each block says.

-- name: long_epochs
INSERT INTO epochs (stream_id, epoch, reference_epoch, creation_time, splits, merges, segment_ids,
    key_starts, key_ends, segment_creation_times, sealed_segments, created_segments)
-- $9 the high segment's creation time; $10/$11/$12 the key bounds: low start, middle, high end.
SELECT $1::bigint, e, e, $4::bigint + e * $5::bigint, 0, 0,
       CASE side WHEN 0 THEN ARRAY[new_id, kept_id] ELSE ARRAY[kept_id, new_id] END,
       ARRAY[$10::float8, $11::float8],
       ARRAY[$11::float8, $12::float8],
       CASE side WHEN 0 THEN ARRAY[$4::bigint + e * $5::bigint, kept_time]
                 ELSE ARRAY[kept_time, $4::bigint + e * $5::bigint] END,
       ARRAY[sealed_id],
       ARRAY[new_id]
FROM (
    SELECT e,
           (e - 1) % 2 AS side,
           (e::bigint << 32) | ($8::int + e - 1)::bigint AS new_id,
           CASE WHEN e = 1 THEN $7::bigint
                ELSE ((e - 1)::bigint << 32) | ($8::int + e - 2)::bigint END AS kept_id,
           CASE WHEN e = 1 THEN $9::bigint ELSE $4::bigint + (e - 1) * $5::bigint END AS kept_time,
           CASE WHEN e = 1 THEN $6::bigint WHEN e = 2 THEN $7::bigint
                ELSE ((e - 2)::bigint << 32) | ($8::int + e - 3)::bigint END AS sealed_id
    FROM generate_series($2::int, $3::int) AS e
) AS h;

-- name: long_segments
-- The segments the chunk creates; those sealed within it carry their sealing (version 1, as
-- the insert_epoch statement's update leaves them). $4 first number, $5 t0, $6 step,
-- $7/$8/$9 the key bounds.
INSERT INTO segments (stream_id, segment_id, number, creation_epoch, creation_time, key_start, key_end,
    sealed_epoch, version)
SELECT $1::bigint, (e::bigint << 32) | ($4::int + e - 1)::bigint, $4::int + e - 1, e,
       $5::bigint + e * $6::bigint,
       CASE (e - 1) % 2 WHEN 0 THEN $7::float8 ELSE $8::float8 END,
       CASE (e - 1) % 2 WHEN 0 THEN $8::float8 ELSE $9::float8 END,
       CASE WHEN e + 2 <= $3::int THEN e + 2 END,
       CASE WHEN e + 2 <= $3::int THEN 1 ELSE 0 END
FROM generate_series($2::int, $3::int) AS e;

-- name: long_seal_earlier
-- Segments created before the chunk and sealed in it ($2: ids, $3: the epochs sealing them).
UPDATE segments g SET sealed_epoch = u.epoch, version = g.version + 1
FROM unnest($2::bigint[], $3::int[]) AS u(segment_id, epoch)
WHERE g.stream_id = $1 AND g.segment_id = u.segment_id AND g.sealed_epoch IS NULL;

-- name: long_sealed_sizes
-- The sizes of the segments sealed in the chunk, into their creation epoch's shard: a segment
-- wrote (1 + number % 8) bytes a millisecond from its creation to its sealing. As if each seal
-- had added its entry: the version counts the entries after the first. $9/$10 the epoch-0
-- segments' creation times, $11/$12 their numbers, $13 epochs a shard.
INSERT INTO sealed_size_shards AS z (stream_id, shard, sizes, version)
SELECT $1::bigint, created / $13::int, jsonb_object_agg(sid::text, size), count(*) - 1
FROM (
    SELECT CASE WHEN s = 1 THEN $6::bigint WHEN s = 2 THEN $7::bigint
                ELSE ((s - 2)::bigint << 32) | ($8::int + s - 3)::bigint END AS sid,
           CASE WHEN s <= 2 THEN 0 ELSE s - 2 END AS created,
           ($4::bigint + s * $5::bigint
               - CASE WHEN s = 1 THEN $9::bigint WHEN s = 2 THEN $10::bigint
                      ELSE $4::bigint + (s - 2) * $5::bigint END)
             * (1 + CASE WHEN s = 1 THEN $11::int WHEN s = 2 THEN $12::int
                         ELSE $8::int + s - 3 END % 8) AS size
    FROM generate_series($2::int, $3::int) AS s
) AS sealed
GROUP BY created / $13::int
ON CONFLICT (stream_id, shard) DO UPDATE
SET sizes = z.sizes || EXCLUDED.sizes, version = z.version + EXCLUDED.version + 1;

-- name: long_move_pointer
-- The current epoch and the records every scale rewrote (the state went ACTIVE -> SCALING ->
-- ACTIVE, the transition was set and reset): their versions count those writes. Guarded by the
-- epoch the chunk starts after; the pointer's trigger tells a running controller.
WITH moved AS (
    UPDATE stream_current_epochs SET epoch = $3::int, version = version + ($3::int - $2::int)
    WHERE stream_id = $1::bigint AND epoch = $2::int
    RETURNING stream_id
), state AS (
    UPDATE stream_states x SET version = x.version + 2 * ($3::int - $2::int) FROM moved WHERE x.stream_id = moved.stream_id
), transition AS (
    UPDATE stream_epoch_transitions x SET version = x.version + 2 * ($3::int - $2::int)
    FROM moved WHERE x.stream_id = moved.stream_id
)
SELECT count(*) FROM moved;

-- name: long_store_rows
-- The embedded store's rows follow the active set: the sealed segments' go ($2), the new
-- active ones' come ($3 names, $4 creation times, $5 lengths), as the generator keeps them.
WITH gone AS (
    DELETE FROM embedded_segments WHERE name = ANY($2::text[])
)
INSERT INTO embedded_segments (name, kind, length, start_offset, sealed, scale_type, target_rate,
    rollover_size_bytes, key_length, created_at, version)
SELECT u.name, 'stream', u.length, 0, false, c.scale_type, c.target_rate, 0, 0, u.created, 0
FROM stream_configs c, unnest($3::text[], $4::bigint[], $5::bigint[]) AS u(name, created, length)
WHERE c.stream_id = $1;

-- name: long_stream_state
-- Where a long stream stands: epoch 0's segments, epoch 1's time (the step), the current epoch.
SELECT s.id, z.epoch AS current, e0.creation_time AS t0, e0.segment_ids, e0.key_starts, e0.key_ends,
       e0.segment_creation_times, e1.creation_time AS t1, ec.segment_ids AS current_ids
FROM streams s
JOIN stream_current_epochs z ON z.stream_id = s.id
JOIN epochs e0 ON e0.stream_id = s.id AND e0.epoch = 0
JOIN epochs ec ON ec.stream_id = s.id AND ec.epoch = z.epoch
LEFT JOIN epochs e1 ON e1.stream_id = s.id AND e1.epoch = 1
WHERE s.scope = $1 AND s.name = $2;

-- name: store_rows_exist
SELECT EXISTS (SELECT 1 FROM embedded_segments WHERE name = ANY($1::text[]));
