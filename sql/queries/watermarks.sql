-- Watermarks: writer marks and emitted watermarks.
-- Every update and delete of a mark is conditional on the version read; the round's writes are
-- also fenced: they land only while the bucket_owners row still has the generation the
-- process claimed. A watermark append is conditional on the sequence number it follows.
-- Stream cuts are stored as [[segment id, offset, key start, key end], ...].

-- name: get_writer_mark
-- One row while the stream exists; the mark columns are NULL when the writer has no mark.
SELECT s.id AS stream_id, m.mark_time, m.position, m.alive, m.version
FROM streams s LEFT JOIN writer_marks m ON m.stream_id = s.id AND m.writer = $3
WHERE s.scope = $1 AND s.name = $2;

-- name: create_writer_mark
-- No row: the stream is missing or a concurrent note created the mark first.
INSERT INTO writer_marks (stream_id, writer, mark_time, position, alive)
SELECT id, $3, $4, $5::jsonb, $6 FROM streams WHERE scope = $1 AND name = $2
ON CONFLICT (stream_id, writer) DO NOTHING
RETURNING version;

-- name: update_writer_mark
UPDATE writer_marks m SET mark_time = $4, position = $5::jsonb, alive = $6, version = m.version + 1
FROM streams s
WHERE s.scope = $1 AND s.name = $2 AND m.stream_id = s.id AND m.writer = $3 AND m.version = $7
RETURNING m.version;

-- name: members
-- A page of the member streams of the buckets $2 (of $1): streams with at least one mark,
-- after stream id $3, at most $4. Marks come as parallel arrays ordered by writer, the latest
-- watermark as columns (NULL when none), and the segment of its `_MARK<stream>` (one segment,
-- never scaled; NULL when it has none): one round trip for a whole page.
WITH page AS (
    SELECT s.id, s.scope, s.name, (s.name_hash & 2147483647) % $1::int AS bucket
    FROM streams s
    WHERE s.id > $3::bigint
      AND s.id IN (SELECT stream_id FROM writer_marks WHERE stream_id > $3::bigint)
      AND s.scope <> '_system'
      AND (s.name_hash & 2147483647) % $1::int = ANY($2::int[])
    ORDER BY s.id
    LIMIT $4
)
SELECT p.id AS stream_id, p.scope, p.name, p.bucket,
       -- A lookup per row of the page (a join would scan every config).
       (SELECT c.timestamp_aggregation_timeout FROM stream_configs c WHERE c.stream_id = p.id)
           AS timestamp_aggregation_timeout,
       m.writers, m.times, m.positions, m.alive, m.inactive_since, m.versions,
       w.seq, w.lower_time_bound, w.upper_time_bound, w.stream_cut, w.created_at, w.mark_offset,
       (SELECT e.segment_ids[1]
        FROM streams ms
        JOIN stream_current_epochs ce ON ce.stream_id = ms.id
        JOIN epochs e ON e.stream_id = ms.id AND e.epoch = ce.epoch
        WHERE ms.scope = p.scope AND ms.name = '_MARK' || p.name) AS mark_segment
FROM page p
CROSS JOIN LATERAL (
    SELECT array_agg(k.writer ORDER BY k.writer) AS writers,
           array_agg(k.mark_time ORDER BY k.writer) AS times,
           jsonb_agg(k.position ORDER BY k.writer) AS positions,
           array_agg(k.alive ORDER BY k.writer) AS alive,
           array_agg(k.inactive_since ORDER BY k.writer) AS inactive_since,
           array_agg(k.version ORDER BY k.writer) AS versions
    FROM writer_marks k WHERE k.stream_id = p.id
) m
LEFT JOIN LATERAL (
    SELECT x.seq, x.lower_time_bound, x.upper_time_bound, x.stream_cut, x.created_at, x.mark_offset
    FROM watermarks x WHERE x.stream_id = p.id ORDER BY x.seq DESC LIMIT 1
) w ON true
WHERE m.writers IS NOT NULL
ORDER BY p.id;

-- name: member
-- The same shape as `members`, for one stream by name; writers is NULL when it has no marks.
SELECT s.id AS stream_id, s.scope, s.name, (s.name_hash & 2147483647) % $3::int AS bucket,
       c.timestamp_aggregation_timeout,
       m.writers, m.times, m.positions, m.alive, m.inactive_since, m.versions,
       w.seq, w.lower_time_bound, w.upper_time_bound, w.stream_cut, w.created_at, w.mark_offset,
       (SELECT e.segment_ids[1]
        FROM streams ms
        JOIN stream_current_epochs ce ON ce.stream_id = ms.id
        JOIN epochs e ON e.stream_id = ms.id AND e.epoch = ce.epoch
        WHERE ms.scope = s.scope AND ms.name = '_MARK' || s.name) AS mark_segment
FROM streams s
JOIN stream_configs c ON c.stream_id = s.id
CROSS JOIN LATERAL (
    SELECT array_agg(k.writer ORDER BY k.writer) AS writers,
           array_agg(k.mark_time ORDER BY k.writer) AS times,
           jsonb_agg(k.position ORDER BY k.writer) AS positions,
           array_agg(k.alive ORDER BY k.writer) AS alive,
           array_agg(k.inactive_since ORDER BY k.writer) AS inactive_since,
           array_agg(k.version ORDER BY k.writer) AS versions
    FROM writer_marks k WHERE k.stream_id = s.id
) m
LEFT JOIN LATERAL (
    SELECT x.seq, x.lower_time_bound, x.upper_time_bound, x.stream_cut, x.created_at, x.mark_offset
    FROM watermarks x WHERE x.stream_id = s.id ORDER BY x.seq DESC LIMIT 1
) w ON true
WHERE s.scope = $1 AND s.name = $2;

-- name: segment_ranges
SELECT g.stream_id, g.segment_id, g.key_start, g.key_end
FROM unnest($1::bigint[], $2::bigint[]) AS u(stream_id, segment_id)
JOIN segments g ON g.stream_id = u.stream_id AND g.segment_id = u.segment_id;

-- name: epoch_segments
SELECT e.stream_id, e.epoch, e.segment_ids, e.key_starts, e.key_ends
FROM unnest($1::bigint[], $2::int[]) AS u(stream_id, epoch)
JOIN epochs e ON e.stream_id = u.stream_id AND e.epoch = u.epoch;

-- name: append_watermarks
-- Pravega's conditional append to the revisioned mark stream: number after_seq + 1, only when
-- after_seq is still the stream's latest (0: none) and the fence holds. Two appends after the
-- same number meet on the primary key; the later one is dropped. A landed append trims its
-- stream to the $10 most recent watermarks, so the table does not grow without bound. $11: where
-- each one's Event ends in the `_MARK` segment (NULL: not appended there).
WITH input AS (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::int[], $4::bigint[], $5::bigint[],
                         $6::bigint[], $7::bigint[], $8::text[], $9::bigint[], $11::bigint[])
        AS i(stream_id, service, bucket, generation, after_seq, low, high, cut, created_at, mark_offset)
), allowed AS (
    -- A stream deleted since the round read it is left out rather than failing the batch.
    SELECT i.* FROM input i JOIN streams s ON s.id = i.stream_id
    WHERE EXISTS (
            SELECT 1 FROM bucket_owners o
            WHERE o.service = i.service AND o.bucket = i.bucket AND o.generation = i.generation
        )
      AND COALESCE((SELECT max(x.seq) FROM watermarks x WHERE x.stream_id = i.stream_id), 0) = i.after_seq
), appended AS (
    INSERT INTO watermarks (stream_id, seq, lower_time_bound, upper_time_bound, stream_cut, created_at,
                            mark_offset)
    SELECT stream_id, after_seq + 1, low, high, cut::jsonb, created_at, mark_offset FROM allowed
    ON CONFLICT (stream_id, seq) DO NOTHING
    RETURNING stream_id, seq
), trimmed AS (
    DELETE FROM watermarks x USING appended a
    WHERE x.stream_id = a.stream_id AND x.seq <= a.seq - $10::bigint
)
SELECT stream_id FROM appended;

-- name: remove_marks
-- Inactive writers are removed, each only if its mark is still the one read.
WITH input AS (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::text[], $5::int[], $6::bigint[])
        AS i(stream_id, writer, version, service, bucket, generation)
), gone AS (
    DELETE FROM writer_marks m USING input i
    WHERE m.stream_id = i.stream_id AND m.writer = i.writer AND m.version = i.version
      AND EXISTS (
            SELECT 1 FROM bucket_owners o
            WHERE o.service = i.service AND o.bucket = i.bucket AND o.generation = i.generation
        )
    RETURNING 1
)
SELECT count(*) FROM gone;

-- name: set_inactive_since
WITH input AS (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::text[], $5::int[], $6::bigint[],
                         $7::bigint[])
        AS i(stream_id, writer, version, service, bucket, generation, since)
), changed AS (
    UPDATE writer_marks m SET inactive_since = i.since, version = m.version + 1
    FROM input i
    WHERE m.stream_id = i.stream_id AND m.writer = i.writer AND m.version = i.version
      AND EXISTS (
            SELECT 1 FROM bucket_owners o
            WHERE o.service = i.service AND o.bucket = i.bucket AND o.generation = i.generation
        )
    RETURNING 1
)
SELECT count(*) FROM changed;

-- name: list_watermarks
-- Newest first; one row with NULL columns for a stream without watermarks, none when missing.
SELECT s.id AS stream_id, w.seq, w.lower_time_bound, w.upper_time_bound, w.stream_cut, w.created_at,
       w.mark_offset
FROM streams s
LEFT JOIN LATERAL (
    SELECT x.seq, x.lower_time_bound, x.upper_time_bound, x.stream_cut, x.created_at, x.mark_offset
    FROM watermarks x WHERE x.stream_id = s.id ORDER BY x.seq DESC LIMIT $3
) w ON true
WHERE s.scope = $1 AND s.name = $2
ORDER BY w.seq DESC;

-- name: txn_commit_times
-- Writer id and commit time recorded on the batch's transactions (commit with a writer id), read
-- before the batch completes (completion deletes the active records).
SELECT t.writer_id, t.commit_time
FROM streams s
JOIN transactions t ON t.stream_id = s.id
JOIN unnest($3::bigint[], $4::bigint[]) AS b(high, low) ON t.txn_high = b.high AND t.txn_low = b.low
WHERE s.scope = $1 AND s.name = $2 AND t.writer_id IS NOT NULL AND t.commit_time IS NOT NULL;
