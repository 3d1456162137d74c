-- Truncation and retention: the current truncation of each stream, the recorded retention cuts,
-- and the subscribers whose cuts bound consumption-based retention.

-- The controller keeps one truncation record per stream (the latest): truncated_bytes and
-- deleted_segments only grow. Each completed truncation is in reporting.truncation_history.
CREATE VIEW reporting.truncations AS
SELECT s.id AS stream_id,
       s.scope,
       s.name AS stream,
       t.stream_cut <> '{}'::jsonb AS truncated,
       t.stream_cut,
       t.span,
       t.size_till AS truncated_bytes,
       t.updating AS in_progress,
       ARRAY(
           SELECT DISTINCT u.segment_id
           FROM unnest(t.deleted_segments || CASE WHEN t.updating THEN '{}'::bigint[] ELSE t.to_delete END)
               AS u(segment_id)
           ORDER BY u.segment_id
       ) AS deleted_segments,
       CASE WHEN t.updating THEN t.to_delete ELSE '{}'::bigint[] END AS deleting_segments
FROM stream_truncations t
JOIN streams s ON s.id = t.stream_id;

-- One row per completed truncation, in completion order per stream. Rows for truncations that
-- completed before migration 0012 are summed up in one row per stream dated at the migration.
CREATE VIEW reporting.truncation_history AS
SELECT h.stream_id,
       s.scope,
       s.name AS stream,
       h.id AS truncation_id,
       h.completed_at AS completion_time,
       h.stream_cut,
       h.truncated_bytes,
       h.total_truncated_bytes,
       h.deleted_segments,
       cardinality(h.deleted_segments) AS deleted_count
FROM truncation_history h
JOIN streams s ON s.id = h.stream_id;

CREATE VIEW reporting.retention_set AS
SELECT s.id AS stream_id,
       s.scope,
       s.name AS stream,
       r.recording_time,
       r.recording_size AS recording_size_bytes,
       r.stream_cut
FROM retention_set r
JOIN streams s ON s.id = r.stream_id;

CREATE VIEW reporting.subscribers AS
SELECT s.id AS stream_id,
       s.scope,
       s.name AS stream,
       b.subscriber,
       b.reader_group_id,
       b.generation,
       b.truncation_stream_cut,
       b.update_time
FROM stream_subscribers b
JOIN streams s ON s.id = b.stream_id;
