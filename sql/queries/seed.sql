-- The history generator (`pgcontroller dev seed`, app/store/seed.py). The bulk rows go in with
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
