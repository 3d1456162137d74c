-- Scopes. Each block's name is the store method that runs it.

-- name: create_scope
INSERT INTO scopes (name, created_at) VALUES ($1, $2)
ON CONFLICT (name) DO NOTHING
RETURNING name;

-- name: get_scope
SELECT state, version FROM scopes WHERE name = $1;

-- name: set_scope_state
UPDATE scopes SET state = $2, version = version + 1
WHERE name = $1 AND version = $3
RETURNING version;

-- name: delete_scope
-- Deletes only an empty scope at the version it was read; the FK from streams stops a
-- stream created concurrently.
WITH target AS (SELECT name, version FROM scopes WHERE name = $1),
     busy AS (SELECT EXISTS (SELECT 1 FROM streams WHERE scope = $1) AS has_streams),
     gone AS (
        DELETE FROM scopes s USING target, busy
        WHERE s.name = target.name AND s.version = target.version AND NOT busy.has_streams
        RETURNING s.name
     )
SELECT (SELECT count(*) FROM target) AS found,
       (SELECT has_streams FROM busy) AS has_streams,
       (SELECT count(*) FROM gone) AS deleted;

-- name: list_scopes
SELECT name FROM scopes WHERE name > $1 ORDER BY name LIMIT $2;

-- name: scope_stream_names
SELECT name FROM streams WHERE scope = $1 ORDER BY name;
