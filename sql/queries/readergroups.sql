-- Reader groups. Each block's name is the store method that runs it.

-- name: create_reader_group
-- The scope row is locked FOR SHARE, so a concurrent recursive delete that marks it DELETING
-- either waits for this insert (and then finds the group) or is seen here (and nothing is
-- inserted). A taken name inserts nothing: the caller reads what is there.
WITH target AS (
    SELECT state FROM scopes WHERE name = $1 FOR SHARE
), added AS (
    INSERT INTO reader_groups (scope, name, id, generation, state, config, updating, created_at)
    SELECT $1, $2, $3, $4, $5, $6, $7, $8 FROM target WHERE target.state = 'ACTIVE'
    ON CONFLICT (scope, name) DO NOTHING
    RETURNING version
)
SELECT (SELECT state FROM target) AS scope_state, (SELECT version FROM added) AS version;

-- name: get_reader_group
SELECT scope, name, id, generation, state, config, updating, created_at, version
FROM reader_groups WHERE scope = $1 AND name = $2;

-- name: update_reader_group
-- Only the incarnation with this id, at the version read.
UPDATE reader_groups
SET generation = $4, state = $5, config = $6, updating = $7, version = version + 1
WHERE scope = $1 AND name = $2 AND id = $3 AND version = $8
RETURNING version;

-- name: delete_reader_group
-- Like every write, it names the incarnation: a re-created group starts again at version 0.
WITH gone AS (
    DELETE FROM reader_groups WHERE scope = $1 AND name = $2 AND id = $3 AND version = $4
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM gone) AS deleted,
       EXISTS (SELECT 1 FROM reader_groups WHERE scope = $1 AND name = $2 AND id = $3) AS present;

-- name: list_reader_groups
-- No row: the scope is missing; one row with a NULL name: it has no reader group.
SELECT r.name
FROM scopes s LEFT JOIN reader_groups r ON r.scope = s.name
WHERE s.name = $1
ORDER BY r.name;

-- name: count_reader_groups
SELECT count(*) FROM reader_groups WHERE scope = $1;
