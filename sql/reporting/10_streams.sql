-- Scopes and streams: one row each. Columns and units: sql/reporting/README.md.
-- Times are milliseconds since the Unix epoch on the controller's clock; sizes are bytes.

CREATE VIEW reporting.scopes AS
SELECT sc.name AS scope,
       sc.state,
       sc.created_at AS creation_time,
       (SELECT count(*) FROM streams s WHERE s.scope = sc.name) AS stream_count
FROM scopes sc;

-- Per-stream aggregates are correlated to one stream (s.id), so a read of a range of stream ids
-- touches only those streams' rows. The segment counts and sealed bytes are the totals the
-- triggers of migration 0019 keep (stream_report_totals), so a row costs the same at any history
-- length; a stream without a totals row has no segments and no sealed sizes yet.
CREATE VIEW reporting.streams AS
SELECT s.id AS stream_id,
       s.scope,
       s.name AS stream,
       s.name LIKE '\_%' AS internal,
       s.creation_time,
       st.state,
       CASE c.scale_type
           WHEN 0 THEN 'FIXED_NUM_SEGMENTS'
           WHEN 1 THEN 'BY_RATE_IN_KBYTES_PER_SEC'
           WHEN 2 THEN 'BY_RATE_IN_EVENTS_PER_SEC'
       END AS scale_type,
       c.target_rate,
       c.scale_factor,
       c.min_num_segments,
       CASE c.retention_type WHEN 1 THEN 'TIME' WHEN 2 THEN 'SIZE' END AS retention_type,
       CASE WHEN c.retention_type IS NOT NULL THEN c.retention_param END AS retention_min,
       CASE WHEN c.retention_type IS NOT NULL THEN c.retention_max END AS retention_max,
       c.tags,
       c.timestamp_aggregation_timeout AS timestamp_aggregation_timeout_ms,
       c.rollover_size_bytes,
       c.updating AS config_updating,
       ce.epoch AS current_epoch,
       e.reference_epoch AS current_reference_epoch,
       e.creation_time AS current_epoch_time,
       cardinality(e.segment_ids) AS segment_count,
       (SELECT max(x.epoch) FROM epochs x WHERE x.stream_id = s.id) AS latest_epoch,
       COALESCE(etr.active_epoch >= 0, false) AS scale_in_progress,
       COALESCE(g.segments_created, 0) AS segments_created,
       COALESCE(g.segments_sealed, 0) AS segments_sealed,
       COALESCE(g.sealed_bytes, 0) AS sealed_bytes,
       COALESCE(t.size_till, 0) AS truncated_bytes,
       CASE
           WHEN t.stream_cut IS NOT NULL AND t.stream_cut <> '{}'::jsonb THEN t.stream_cut
           ELSE (SELECT jsonb_object_agg(h.segment_id::text, 0)
                 FROM epochs e0 CROSS JOIN LATERAL unnest(e0.segment_ids) AS h(segment_id)
                 WHERE e0.stream_id = s.id AND e0.epoch = 0)
       END AS head_stream_cut,
       COALESCE(t.updating, false) AS truncation_in_progress,
       rs.recording_time AS last_retention_cut_time,
       rs.recording_size AS last_retention_cut_size_bytes,
       (s.name_hash & 2147483647) % cs.request_buckets AS request_bucket,
       (s.name_hash & 2147483647) % cs.retention_buckets AS retention_bucket,
       (s.name_hash & 2147483647) % cs.watermark_buckets AS watermark_bucket
FROM streams s
LEFT JOIN stream_states st ON st.stream_id = s.id
LEFT JOIN stream_configs c ON c.stream_id = s.id
LEFT JOIN stream_current_epochs ce ON ce.stream_id = s.id
LEFT JOIN epochs e ON e.stream_id = s.id AND e.epoch = ce.epoch
LEFT JOIN stream_epoch_transitions etr ON etr.stream_id = s.id
LEFT JOIN stream_truncations t ON t.stream_id = s.id
LEFT JOIN cluster_settings cs ON cs.id = 1
LEFT JOIN stream_report_totals g ON g.stream_id = s.id
LEFT JOIN LATERAL (
    SELECT r.recording_time, r.recording_size
    FROM retention_set r WHERE r.stream_id = s.id
    ORDER BY r.recording_time DESC LIMIT 1
) rs ON true;
