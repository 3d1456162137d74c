-- Auto-scaling: the report intake and the cold-segment markers. Each block's name is the store
-- method that runs it (put_cold_marker runs insert_/set_cold_marker).

-- name: check_segment
-- Whether the stream exists and has (or had) the segment: a report about anything else is refused
-- before it is queued (enqueue_report runs this too, on its own connection).
SELECT EXISTS (
           SELECT 1 FROM segments g WHERE g.stream_id = s.id AND g.segment_id = $3
       ) AS has_segment
FROM streams s
WHERE s.scope = $1 AND s.name = $2;

-- name: cold_markers
SELECT c.segment_id, c.until, c.version
FROM streams s JOIN segment_cold_markers c ON c.stream_id = s.id
WHERE s.scope = $1 AND s.name = $2;

-- name: insert_cold_marker
INSERT INTO segment_cold_markers (stream_id, segment_id, until)
SELECT s.id, $3, $4 FROM streams s WHERE s.scope = $1 AND s.name = $2
ON CONFLICT (stream_id, segment_id) DO NOTHING
RETURNING version;

-- name: set_cold_marker
UPDATE segment_cold_markers c SET until = $4, version = c.version + 1
FROM streams s
WHERE c.stream_id = s.id AND s.scope = $1 AND s.name = $2 AND c.segment_id = $3 AND c.version = $5
RETURNING c.version;

-- name: delete_cold_markers
-- Each marker only at the version it was read at: one rewritten meanwhile stays.
DELETE FROM segment_cold_markers c
USING streams s, unnest($3::bigint[], $4::bigint[]) AS gone(segment_id, version)
WHERE c.stream_id = s.id AND s.scope = $1 AND s.name = $2
  AND c.segment_id = gone.segment_id AND c.version = gone.version
RETURNING c.segment_id;

-- name: stream_exists
SELECT EXISTS (SELECT 1 FROM streams WHERE scope = $1 AND name = $2);
