-- Key-value tables and the last segment number of deleted ones.

-- name: kvt_scope_for_share
-- Taken before the insert: a scope marked DELETING concurrently is seen (the UPDATE waits for
-- this lock, or this read waits for it and re-reads the new state).
SELECT state FROM scopes WHERE name = $1 FOR SHARE;

-- name: insert_kvt
-- The safe starting number is fixed here: the previous table of the name is gone (the key is
-- free), and its deletion recorded its highest segment number before its row went.
INSERT INTO kvtables (scope, name, id, partition_count, primary_key_length, secondary_key_length,
                      rollover_size_bytes, start_number, state, creation_time)
VALUES ($1, $2, $3, $4, $5, $6, $7,
        COALESCE((SELECT last_segment_number + 1 FROM deleted_kvtables WHERE scope = $1 AND name = $2), 0),
        'CREATING', $8)
ON CONFLICT (scope, name) DO NOTHING
RETURNING scope, name, id, partition_count, primary_key_length, secondary_key_length,
          rollover_size_bytes, start_number, state, creation_time, version;

-- name: get_kvt
SELECT scope, name, id, partition_count, primary_key_length, secondary_key_length,
       rollover_size_bytes, start_number, state, creation_time, version
FROM kvtables WHERE scope = $1 AND name = $2;

-- name: set_kvt_state
UPDATE kvtables SET state = $4, version = version + 1
WHERE scope = $1 AND name = $2 AND id = $3 AND version = $5
RETURNING version;

-- name: delete_kvt
DELETE FROM kvtables
WHERE scope = $1 AND name = $2 AND id = $3 AND version = $4
RETURNING version;

-- name: list_kvts
-- Every table of the scope, whatever its state (Java lists the scope's table of KVTs, which
-- holds a name from the create call until the deletion finished).
SELECT EXISTS (SELECT 1 FROM scopes WHERE name = $1) AS scope_exists,
       ARRAY(SELECT name FROM kvtables WHERE scope = $1 AND name > $2 ORDER BY name LIMIT $3) AS names;

-- name: count_kvts
SELECT count(*) FROM kvtables WHERE scope = $1;

-- name: get_deleted_kvt
SELECT last_segment_number, version FROM deleted_kvtables WHERE scope = $1 AND name = $2;

-- name: insert_deleted_kvt
INSERT INTO deleted_kvtables (scope, name, last_segment_number) VALUES ($1, $2, $3)
ON CONFLICT (scope, name) DO NOTHING
RETURNING version;

-- name: set_deleted_kvt
UPDATE deleted_kvtables SET last_segment_number = $3, version = version + 1
WHERE scope = $1 AND name = $2 AND version = $4
RETURNING version;
