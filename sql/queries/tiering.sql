-- The long-term storage tier's index (app/store/tiering.py): which segments have bytes to move,
-- the move itself, and the garbage queue of objects nothing references.

-- name: backlog
-- Every segment with bytes in PostgreSQL: how many, and whether it is sealed (the storage writer
-- picks its candidates and each container's backlog from these). octet_length reads a compressed
-- value's size from its header: nothing is decompressed; a packed chunk's size is its lz4_length.
SELECT c.segment, sum(COALESCE(c.lz4_length, octet_length(c.data)))::bigint AS bytes, bool_or(s.sealed) AS sealed,
       min(s.kind) AS kind
FROM segment_chunks c
JOIN embedded_segments s ON s.name = c.segment
WHERE s.kind <> 'table'
GROUP BY c.segment;

-- name: chunk_rows
-- The segment's oldest rows in PostgreSQL, in offset order, until they hold $2 bytes (the row
-- that reaches it included); a packed row comes as it is stored, with its lz4_length.
SELECT start_offset, data, lz4_length
FROM (
    SELECT start_offset, data, lz4_length,
           sum(COALESCE(lz4_length, octet_length(data))) OVER (ORDER BY start_offset)
               - COALESCE(lz4_length, octet_length(data)) AS before
    FROM segment_chunks
    WHERE segment = $1
) r
WHERE before < $2
ORDER BY start_offset;

-- name: intend
-- An object about to be written: listed as garbage until the index names it, so a crash between
-- the write and the index leaves it for the collector.
INSERT INTO tier_garbage (object, since) VALUES ($1, $2);

-- name: renew_intent
-- The writer is still writing the object: its grace starts again (a claim made on the version
-- read before this fails), unless the collector has claimed it already.
UPDATE tier_garbage SET since = $2, version = version + 1
WHERE object = $1 AND NOT claimed
RETURNING object;

-- name: relist
-- An object written and not recorded is garbage from now, even if the collector deleted its name
-- (and forgot it) while the write was still in flight; a claimed row is left to the collector.
INSERT INTO tier_garbage (object, since) VALUES ($1, $2)
ON CONFLICT (object) DO UPDATE SET since = EXCLUDED.since, version = tier_garbage.version + 1
WHERE NOT tier_garbage.claimed
RETURNING object;

-- name: lock_segment
SELECT name FROM embedded_segments WHERE name = $1 FOR UPDATE;

-- name: move_rows
-- Run after lock_segment (a fresh snapshot): the rows the object holds leave PostgreSQL, and the
-- object stops being garbage unless the collector has claimed it (then nothing may name it).
WITH intent AS (
    DELETE FROM tier_garbage WHERE object = $3 AND NOT claimed RETURNING object
), moved AS (
    DELETE FROM segment_chunks c
    WHERE c.segment = $1 AND c.start_offset = ANY($2::bigint[]) AND EXISTS (SELECT 1 FROM intent)
    RETURNING COALESCE(c.lz4_length, octet_length(c.data)) AS bytes
)
SELECT (SELECT count(*) FROM intent) AS intents, count(*) AS rows, COALESCE(sum(bytes), 0)::bigint AS bytes
FROM moved;

-- name: record_chunk
INSERT INTO segment_tiered_chunks (segment, start_offset, length, object, created_at)
VALUES ($1, $2, $3, $4, $5);

-- name: stamp_garbage
-- Released objects (queued by the trigger, without a time) start their grace now.
UPDATE tier_garbage SET since = $1, version = version + 1 WHERE since IS NULL;

-- name: due_garbage
SELECT object, version FROM tier_garbage WHERE since <= $1 ORDER BY since, object LIMIT $2;

-- name: claim_garbage
-- Each claimed only as the version read: a row whose grace was renewed meanwhile stays.
UPDATE tier_garbage g SET claimed = true, version = g.version + 1
FROM unnest($1::text[], $2::bigint[]) AS d(object, version)
WHERE g.object = d.object AND g.version = d.version
RETURNING g.object;

-- name: postpone_garbage
-- Objects whose delete failed go behind the rest of the queue for another grace, still claimed
-- (a delete that failed may have deleted: nothing may record them).
UPDATE tier_garbage SET since = $2, version = version + 1 WHERE object = ANY($1::text[]) AND claimed;

-- name: forget_garbage
DELETE FROM tier_garbage WHERE object = ANY($1::text[]) AND claimed;

-- name: any_tiered
SELECT EXISTS (SELECT 1 FROM segment_tiered_chunks) OR EXISTS (SELECT 1 FROM tier_garbage);

-- name: tiered_bytes
SELECT segment, sum(length)::bigint AS bytes FROM segment_tiered_chunks GROUP BY segment;

-- name: garbage_count
SELECT count(*) FROM tier_garbage;
