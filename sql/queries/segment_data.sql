-- The embedded segment store's durable state: segment rows (embedded_segments), their bytes
-- (segment_chunks), attributes (segment_attributes) and table entries (table_entries).
-- Whatever changes a segment's bytes, length or seal locks its embedded_segments row first
-- (FOR UPDATE), so appends, seals, truncations, merges and table writes on one segment run one
-- at a time. A lock taken inside a statement sees the row's latest committed version; other
-- tables are read by a later statement (a fresh snapshot) or through ON CONFLICT, never from a
-- snapshot older than the lock.

-- name: create_segment
INSERT INTO embedded_segments
    (name, kind, scale_type, target_rate, rollover_size_bytes, key_length, created_at, last_modified)
VALUES ($1, $2, $3, $4, $5, $6, $7, $7)
ON CONFLICT (name) DO NOTHING
RETURNING name;

-- name: create_segments
-- Several creates in one statement (names distinct): the names created come back; a name
-- that exists already does not.
INSERT INTO embedded_segments
    (name, kind, scale_type, target_rate, rollover_size_bytes, key_length, created_at, last_modified)
SELECT n.name, n.kind, n.scale_type, n.target_rate, n.rollover, n.key_length, $7, $7
FROM unnest($1::text[], $2::text[], $3::int[], $4::int[], $5::bigint[], $6::int[])
    AS n(name, kind, scale_type, target_rate, rollover, key_length)
ON CONFLICT (name) DO NOTHING
RETURNING name;

-- name: segment_state
SELECT name, kind, length, start_offset, sealed, last_modified, key_length, scale_type, target_rate
FROM embedded_segments WHERE name = $1;

-- name: lock_segment
SELECT name, kind, length, start_offset, sealed, key_length
FROM embedded_segments WHERE name = $1
FOR UPDATE;

-- name: writer_event_number
-- One row: whether the segment exists and the writer's ($2: its attribute id) event number, NULL
-- for none, read after every transaction that appended to the segment and has not ended (any
-- store's, even one whose process died while committing) has ended: the function waits for them
-- on the segment's row, then reads in a snapshot of its own (migration 0023).
SELECT segment_found, event_number FROM pgc_writer_event_number($1, $2::uuid);

-- name: lock_merge
-- A merge's target ($1) and its sources ($2) in one statement, locked in the order the rows come
-- out: the target first, then the sources in name order (the order two merges agree on).
SELECT name, kind, length, start_offset, sealed
FROM embedded_segments WHERE name = $1 OR name = ANY($2::text[])
ORDER BY name <> $1, name
FOR UPDATE;

-- name: lock_merges
-- Several merges' targets ($1) and sources ($2) in one statement, locked in the order the rows
-- come out: the targets in name order, then the sources in name order (a lone merge locks its
-- target, then its sources: no order of the two waits on the other in a circle).
SELECT name, kind, length, start_offset, sealed
FROM embedded_segments WHERE name = ANY($1::text[]) OR name = ANY($2::text[])
ORDER BY name <> ALL($1::text[]), name
FOR UPDATE;

-- name: append
-- One statement: lock the segment, check it ($5: the expected offset of a conditional append,
-- NULL for none), advance the writer's event number ($2: its attribute id, $4: the block's last
-- event number) and, only if it advanced, store the bytes at the end and grow the segment.
-- ON CONFLICT sees the writer's latest committed number even if this statement's snapshot is
-- older (it waited for the lock), so a resent block is never stored twice. Several in one
-- transaction run in order, each seeing the ones before it.
-- $7, $8, $9: the segment's container and this store's host and port (app/store/append_fence.py),
-- all NULL for an unfenced append: a map row naming another store refuses it (`moved`), and the
-- row stays share-locked until the transaction ends, so the container cannot move meanwhile.
-- $10: the block's size when $3 holds it packed (app/store/chunk_packing.py), NULL when $3 is it.
WITH fence AS (
    SELECT host, port FROM container_map WHERE container = $7::int AND $8::text IS NOT NULL
    FOR SHARE
), moved AS (
    SELECT 1 FROM fence WHERE (host, port) IS DISTINCT FROM ($8::text, $9::int)
), seg AS (
    SELECT kind, length, sealed FROM embedded_segments WHERE name = $1 FOR UPDATE
), ok AS (
    SELECT length FROM seg
    WHERE kind <> 'table' AND NOT sealed AND ($5::bigint IS NULL OR length = $5::bigint)
      AND NOT EXISTS (SELECT 1 FROM moved)
), attr AS (
    INSERT INTO segment_attributes AS a (segment, attribute_id, value)
    SELECT $1, $2::uuid, $4::bigint FROM ok
    ON CONFLICT (segment, attribute_id) DO UPDATE
    SET previous_value = a.value, value = GREATEST(a.value, EXCLUDED.value), version = a.version + 1
    RETURNING previous_value
), fresh AS (
    SELECT ok.length FROM ok, attr WHERE attr.previous_value IS NULL OR attr.previous_value < $4::bigint
), chunk AS (
    INSERT INTO segment_chunks (segment, start_offset, data, lz4_length)
    SELECT $1, fresh.length, $3::bytea, $10::int FROM fresh WHERE octet_length($3::bytea) > 0
), grown AS (
    UPDATE embedded_segments s
    SET length = fresh.length + COALESCE($10::int, octet_length($3::bytea)), version = s.version + 1,
        last_modified = $6
    FROM fresh
    WHERE s.name = $1
    RETURNING s.length
)
SELECT seg.kind, seg.sealed, seg.length,
       (SELECT previous_value FROM attr) AS previous,
       (SELECT length FROM grown) AS new_length,
       EXISTS (SELECT 1 FROM moved) AS moved
-- Exactly one row, kind NULL for a segment that does not exist: a group of appends pipelined in
-- one transaction (app/store/group_commit.py) is answered row by row.
FROM (SELECT 1) AS one LEFT JOIN seg ON true;

-- name: read
-- The segment's row and at most $3 bytes from offset $2 in one snapshot: one row per chunk
-- overlapping [$2, $2 + $3), in offset order (one row with NULL data and object when none does).
-- A chunk still in PostgreSQL comes sliced (`data`), or whole when it is packed (`lz4_length` not
-- NULL: the caller unpacks and slices it, app/store/chunk_packing.py); a chunk in the long-term
-- tier comes as its object's name and length (`object`, `object_length`), and the caller reads the
-- slice from the chunk store. The caller joins the slices: joining them here with string_agg cost
-- PostgreSQL five times the CPU of the whole read (bench: 4.3 against 0.8 ms per MB). Every slice
-- position is taken relative to a chunk it overlaps, so it fits the int substring takes; the end
-- of the range is capped at 2^63 - 1, as a client may put $2 near it.
SELECT s.kind, s.length, s.start_offset, s.sealed, c.chunk_start, c.data, c.lz4_length, c.object,
       c.object_length
FROM embedded_segments s
LEFT JOIN LATERAL (
    SELECT c.start_offset AS chunk_start,
           CASE WHEN c.lz4_length IS NULL THEN
               substring(c.data FROM (GREATEST($2::bigint - c.start_offset, 0) + 1)::int
                         FOR LEAST($3::bigint - GREATEST(c.start_offset - $2::bigint, 0),
                                   2147483647)::int)
           ELSE c.data END AS data,
           c.lz4_length, NULL::text AS object, NULL::bigint AS object_length
    FROM segment_chunks c
    WHERE c.segment = s.name
      AND c.start_offset < LEAST($2::bigint, 9223372036854775807 - $3::bigint) + $3::bigint
      AND c.start_offset >= COALESCE(
          (SELECT max(h.start_offset) FROM segment_chunks h
           WHERE h.segment = s.name AND h.start_offset <= $2::bigint), 0)
      AND c.start_offset + COALESCE(c.lz4_length, octet_length(c.data)) > $2::bigint
    UNION ALL
    SELECT t.start_offset, NULL::bytea, NULL::int, t.object, t.length
    FROM segment_tiered_chunks t
    WHERE t.segment = s.name
      AND t.start_offset < LEAST($2::bigint, 9223372036854775807 - $3::bigint) + $3::bigint
      AND t.start_offset >= COALESCE(
          (SELECT max(h.start_offset) FROM segment_tiered_chunks h
           WHERE h.segment = s.name AND h.start_offset <= $2::bigint), 0)
      AND t.start_offset + t.length > $2::bigint
) c ON true
WHERE s.name = $1
ORDER BY c.chunk_start;

-- name: seal
WITH seg AS (
    SELECT kind, length, sealed FROM embedded_segments WHERE name = $1 FOR UPDATE
), sealed_now AS (
    UPDATE embedded_segments s SET sealed = true, version = s.version + 1, last_modified = $2
    FROM seg
    WHERE s.name = $1 AND NOT seg.sealed AND seg.kind <> 'table'
)
SELECT kind, length, sealed FROM seg;

-- name: truncate
-- Moves the start to $2 when start <= $2 <= length, and drops the chunks wholly below it (in
-- PostgreSQL and in the long-term tier).
WITH seg AS (
    SELECT kind, length, start_offset FROM embedded_segments WHERE name = $1 FOR UPDATE
), ok AS (
    SELECT 1 AS one FROM seg WHERE kind <> 'table' AND start_offset <= $2 AND $2 <= length
), moved AS (
    UPDATE embedded_segments s SET start_offset = $2, version = s.version + 1, last_modified = $3
    FROM ok
    WHERE s.name = $1
), dropped AS (
    DELETE FROM segment_chunks c USING ok
    WHERE c.segment = $1 AND c.start_offset < $2
      AND c.start_offset + COALESCE(c.lz4_length, octet_length(c.data)) <= $2
), dropped_tiered AS (
    -- Their objects go to tier_garbage (a trigger), collected after a grace.
    DELETE FROM segment_tiered_chunks t USING ok
    WHERE t.segment = $1 AND t.start_offset < $2 AND t.start_offset + t.length <= $2
)
SELECT kind, length, start_offset FROM seg;

-- name: delete_segment
-- The segment (locked first by the caller, so a delete takes its locks in the same order as a
-- merge into it) and its transaction segments (named "<segment>#transaction.<id>"); their
-- chunks, attributes and entries go with them (ON DELETE CASCADE).
DELETE FROM embedded_segments
WHERE name = $1 OR starts_with(name, $1 || '#transaction.');

-- name: update_policy
UPDATE embedded_segments
SET scale_type = $2, target_rate = $3, version = version + 1, last_modified = $4
WHERE name = $1
RETURNING kind;

-- name: get_attribute
SELECT s.name, a.value
FROM embedded_segments s
LEFT JOIN segment_attributes a ON a.segment = s.name AND a.attribute_id = $2::uuid
WHERE s.name = $1;

-- name: get_attributes
-- Run after the segment's lock: a fresh snapshot.
SELECT attribute_id, value FROM segment_attributes WHERE segment = $1 AND attribute_id = ANY($2::uuid[]);

-- name: put_attributes
-- $3: values; NULL_ATTRIBUTE_VALUE ($4) removes the attribute.
WITH u AS (
    SELECT * FROM unnest($2::uuid[], $3::bigint[]) AS u(attribute_id, value)
), removed AS (
    DELETE FROM segment_attributes a USING u
    WHERE a.segment = $1 AND a.attribute_id = u.attribute_id AND u.value = $4::bigint
)
INSERT INTO segment_attributes AS a (segment, attribute_id, value)
SELECT $1, u.attribute_id, u.value FROM u WHERE u.value <> $4::bigint
ON CONFLICT (segment, attribute_id) DO UPDATE
SET previous_value = a.value, value = EXCLUDED.value, version = a.version + 1;

-- name: merge_apply
-- A merge in one statement, run after lock_merge (so its snapshot holds every committed byte of
-- the sources): the sources' ($2) chunks move to the target ($1) at their base offsets ($3), the
-- source rows go (their attributes with them), and the target takes its new length ($4).
-- The chunks move before the cascade of the sources' deletion runs (at the statement's end), so
-- it finds none of them left.
WITH moved AS (
    UPDATE segment_chunks c
    SET segment = $1, start_offset = c.start_offset + m.base, version = c.version + 1
    FROM unnest($2::text[], $3::bigint[]) AS m(source, base)
    WHERE c.segment = ANY($2::text[]) AND c.segment = m.source
), moved_tiered AS (
    -- A source's chunks in the long-term tier move by their index rows alone, as in Pravega's
    -- SLTS: the objects stay where they are.
    UPDATE segment_tiered_chunks t
    SET segment = $1, start_offset = t.start_offset + m.base, version = t.version + 1
    FROM unnest($2::text[], $3::bigint[]) AS m(source, base)
    WHERE t.segment = ANY($2::text[]) AND t.segment = m.source
), gone AS (
    DELETE FROM embedded_segments WHERE name = ANY($2::text[])
)
UPDATE embedded_segments SET length = $4, version = version + 1, last_modified = $5
WHERE name = $1;

-- name: merges_apply
-- merge_apply for several targets at once, after lock_merges: each source ($2) moves to its
-- target ($1) at its base offset ($3), and each target ($4) takes its new length ($5).
WITH moved AS (
    UPDATE segment_chunks c
    SET segment = m.target, start_offset = c.start_offset + m.base, version = c.version + 1
    FROM unnest($1::text[], $2::text[], $3::bigint[]) AS m(target, source, base)
    WHERE c.segment = ANY($2::text[]) AND c.segment = m.source
), moved_tiered AS (
    UPDATE segment_tiered_chunks t
    SET segment = m.target, start_offset = t.start_offset + m.base, version = t.version + 1
    FROM unnest($1::text[], $2::text[], $3::bigint[]) AS m(target, source, base)
    WHERE t.segment = ANY($2::text[]) AND t.segment = m.source
), gone AS (
    DELETE FROM embedded_segments WHERE name = ANY($2::text[])
)
UPDATE embedded_segments s SET length = t.length, version = s.version + 1, last_modified = $6
FROM unnest($4::text[], $5::bigint[]) AS t(name, length)
WHERE s.name = t.name;

-- name: set_length
-- The target of a merge or a table after a write, already locked by this transaction.
UPDATE embedded_segments SET length = $2, version = version + 1, last_modified = $3
WHERE name = $1;

-- name: table_versions
-- Run after the table's lock: a fresh snapshot.
SELECT key, version FROM table_entries WHERE segment = $1 AND key = ANY($2::bytea[]);

-- name: put_table_entries
INSERT INTO table_entries AS e (segment, key, value, version)
SELECT $1, k, v, ver FROM unnest($2::bytea[], $3::bytea[], $4::bigint[]) AS u(k, v, ver)
ON CONFLICT (segment, key) DO UPDATE SET value = EXCLUDED.value, version = EXCLUDED.version;

-- name: remove_table_entries
DELETE FROM table_entries WHERE segment = $1 AND key = ANY($2::bytea[]);

-- name: table_has_entries
SELECT EXISTS (SELECT 1 FROM table_entries WHERE segment = $1);

-- name: read_table
-- The entries of the keys asked for ($2, in order, repeats included), with the bytes a reply
-- naming each of them would carry ($3: the wire framing of one entry); the entries come only
-- when that is at most $4, and a reply that could not be sent is never read.
WITH reply AS (
    SELECT COALESCE(sum(octet_length(a.key) + COALESCE(octet_length(t.value), 0) + $3::bigint), 0)
           AS bytes
    FROM unnest($2::bytea[]) AS a(key)
    LEFT JOIN table_entries t ON t.segment = $1 AND t.key = a.key
)
SELECT s.kind, reply.bytes AS reply_bytes, e.key, e.value, e.version
FROM embedded_segments s
CROSS JOIN reply
LEFT JOIN table_entries e ON e.segment = s.name AND e.key = ANY($2::bytea[]) AND reply.bytes <= $4
WHERE s.name = $1;

-- name: read_table_page
-- Keys after $2 in key order within [$3, $4] (an empty bound is no bound), at most $5, and of
-- those the ones that fit $6 bytes (each counted with $7 bytes of wire framing; the first always
-- fits): the scan stops at $5 rows, and no value past the page is read.
SELECT s.kind, e.key, e.value, e.version
FROM embedded_segments s
LEFT JOIN LATERAL (
    SELECT key, value, version FROM (
        SELECT key, value, version,
               sum(octet_length(key) + octet_length(value) + $7::bigint)
                   OVER (ORDER BY key ROWS UNBOUNDED PRECEDING)
               AS upto,
               row_number() OVER (ORDER BY key) AS n
        FROM table_entries
        WHERE segment = s.name AND key > $2::bytea
          AND ($3::bytea = ''::bytea OR key >= $3::bytea)
          AND ($4::bytea = ''::bytea OR key <= $4::bytea)
        ORDER BY key
        LIMIT $5
    ) page
    WHERE upto <= $6::bigint OR n = 1
    ORDER BY key
) e ON true
WHERE s.name = $1;

-- name: read_table_delta
-- The live entries whose version is at or after $2, oldest first, at most $3; `fits` tells
-- whether an entry fits $4 bytes (each counted with $5 bytes of wire framing; the first always
-- fits), and only those that fit carry their value.
SELECT s.kind, e.key, e.value, e.version, e.fits
FROM embedded_segments s
LEFT JOIN LATERAL (
    SELECT key, CASE WHEN upto <= $4::bigint OR n = 1 THEN value END AS value, version,
           upto <= $4::bigint OR n = 1 AS fits
    FROM (
        SELECT key, value, version,
               sum(octet_length(key) + octet_length(value) + $5::bigint)
                   OVER (ORDER BY version ROWS UNBOUNDED PRECEDING) AS upto,
               row_number() OVER (ORDER BY version) AS n
        FROM table_entries
        WHERE segment = s.name AND version >= $2::bigint
        ORDER BY version
        LIMIT $3
    ) page
    ORDER BY version
) e ON true
WHERE s.name = $1;

-- name: table_info
SELECT s.kind, s.length, s.start_offset, s.key_length,
       (SELECT count(*) FROM table_entries e WHERE e.segment = s.name) AS entry_count
FROM embedded_segments s
WHERE s.name = $1;

-- name: list_transients
-- A page of transient segments created before $2, in name order after $1, at most $3: the
-- orphan sweep's candidates (it picks those of its containers in Python: the container hash is
-- Pravega's, not SQL's).
SELECT name, created_at FROM embedded_segments
WHERE kind = 'transient' AND name > $1 AND created_at < $2
ORDER BY name
LIMIT $3;

-- name: delete_transients
-- One batch of the orphan sweep: the named transient segments ($1) still created before $2 and
-- unchanged since before $3 (a writer still appending keeps its segment), locked in name order
-- (as a merge locks its sources), with their chunks and attributes (ON DELETE CASCADE).
DELETE FROM embedded_segments
WHERE name IN (
    SELECT name FROM embedded_segments
    WHERE name = ANY($1::text[]) AND kind = 'transient' AND created_at < $2 AND last_modified < $3
    ORDER BY name
    FOR UPDATE
)
RETURNING name;
