-- The embedded segment store's state. Each operation is one statement, so concurrent callers
-- (several controller processes) see each change exactly once.

-- name: create_segments
-- One or more segments of one kind ($1: their names).
INSERT INTO embedded_segments (name, kind, scale_type, target_rate, rollover_size_bytes, key_length, created_at)
SELECT n, $2, $3, $4, $5, $6, $7 FROM unnest($1::text[]) AS n
ON CONFLICT (name) DO NOTHING;

-- name: seal_segment
UPDATE embedded_segments SET sealed = true, version = version + CASE WHEN sealed THEN 0 ELSE 1 END
WHERE name = $1
RETURNING length;

-- name: truncate_segment
UPDATE embedded_segments SET start_offset = GREATEST(start_offset, $2), version = version + 1
WHERE name = $1 AND $2 <= length
RETURNING start_offset;

-- name: delete_segment
DELETE FROM embedded_segments WHERE name = $1 OR name LIKE $2;

-- name: update_policy
UPDATE embedded_segments SET scale_type = $2, target_rate = $3, version = version + 1
WHERE name = $1
RETURNING version;

-- name: get_segment_info
SELECT name, kind, length, start_offset, sealed, key_length FROM embedded_segments WHERE name = $1;

-- name: merge_transaction_segments
-- One statement for a batch ($2: the transaction segments): the unsealed parent is locked
-- first (a concurrent seal waits), the transaction segments are deleted only then, and the
-- parent grows by what was deleted. A merged one is gone and adds nothing the second time;
-- a sealed parent changes nothing.
WITH parent AS (
    SELECT name FROM embedded_segments WHERE name = $1 AND NOT sealed FOR UPDATE
), txn AS (
    DELETE FROM embedded_segments t USING parent
    WHERE t.name = ANY($2::text[]) AND t.kind = 'transaction'
    RETURNING t.length
)
UPDATE embedded_segments p
SET length = p.length + COALESCE((SELECT sum(length) FROM txn), 0),
    version = p.version + CASE WHEN EXISTS (SELECT 1 FROM txn) THEN 1 ELSE 0 END
FROM parent
WHERE p.name = parent.name
RETURNING p.length;

-- name: append
UPDATE embedded_segments SET length = length + $2, version = version + 1
WHERE name = $1 AND NOT sealed
RETURNING length;

-- name: delete_table_segment
DELETE FROM embedded_segments WHERE name = $1 AND kind = 'table' AND (NOT $2 OR length = 0)
RETURNING name;
