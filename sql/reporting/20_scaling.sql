-- How streams scaled: one row per epoch transition, and one row per segment with its lifetime.

-- Epoch e >= 1 against epoch e - 1 (epochs are dense, and a scale always builds on the epoch
-- before it). The split and merge counts are the differences of the cumulative counters the
-- epoch records carry. A rolling transaction writes two duplicate epochs (epoch differs from
-- reference epoch) whose history lists are empty: every segment of the previous epoch is sealed
-- and every segment of the duplicate is new, so those are the lists reported.
-- stream_id is the epochs' own column, so a read by a range of stream ids is an index range scan.
CREATE VIEW reporting.scale_events AS
SELECT e.stream_id,
       s.scope,
       s.name AS stream,
       e.epoch,
       e.reference_epoch,
       e.creation_time AS event_time,
       CASE
           WHEN e.epoch <> e.reference_epoch THEN 'rolling'
           WHEN e.splits - p.splits > 0 AND e.merges - p.merges = 0 THEN 'split'
           WHEN e.merges - p.merges > 0 AND e.splits - p.splits = 0 THEN 'merge'
           ELSE 'other'
       END AS kind,
       CASE WHEN e.epoch <> e.reference_epoch THEN 0 ELSE e.splits - p.splits END AS splits,
       CASE WHEN e.epoch <> e.reference_epoch THEN 0 ELSE e.merges - p.merges END AS merges,
       CASE WHEN e.epoch <> e.reference_epoch THEN p.segment_ids ELSE e.sealed_segments END AS sealed_segments,
       CASE WHEN e.epoch <> e.reference_epoch THEN e.segment_ids ELSE e.created_segments END AS created_segments,
       cardinality(CASE WHEN e.epoch <> e.reference_epoch THEN p.segment_ids ELSE e.sealed_segments END)
           AS sealed_count,
       cardinality(CASE WHEN e.epoch <> e.reference_epoch THEN e.segment_ids ELSE e.created_segments END)
           AS created_count,
       cardinality(p.segment_ids) AS segments_before,
       cardinality(e.segment_ids) AS segments_after,
       e.creation_time - p.creation_time AS previous_epoch_duration_ms
FROM epochs e
JOIN epochs p ON p.stream_id = e.stream_id AND p.epoch = e.epoch - 1
JOIN streams s ON s.id = e.stream_id;

-- Correlated to one stream at a time (see reporting.streams), and flat: a read's predicates on
-- the segment columns (creation_time, segment_id, ...) reach the segments themselves (the
-- subquery is pulled up; segments_by_creation_time serves a creation-time window), and each
-- segment's sealed size is joined from the one shard that can hold it, the shard of its creation
-- epoch (sealed_size_shards: `creation_epoch / 1000`), so the planner picks per plan: a few
-- segments look into their shards, a whole stream expands each shard once and joins by hash.
-- Segment ids are matched as text: PostgreSQL hashes a bigint by folding its halves together
-- (high XOR low), and epoch << 32 | number with numbers growing with epochs folds most ids of a
-- stream onto a few values, which made these hash joins quadratic.
CREATE VIEW reporting.segments AS
SELECT s.id AS stream_id,
       s.scope,
       s.name AS stream,
       g.segment_id,
       g.segment_number,
       g.creation_epoch,
       g.creation_time,
       g.key_start,
       g.key_end,
       g.rolling_copy,
       g.sealed_epoch,
       g.sealed_time,
       g.sealed_size_bytes,
       g.sealed_time - g.creation_time AS lifetime_ms,
       g.deleted_by_truncation
FROM streams s
CROSS JOIN LATERAL (
    SELECT x.segment_id,
           x.number AS segment_number,
           x.creation_epoch,
           x.creation_time,
           x.key_start,
           x.key_end,
           COALESCE(ce.epoch <> ce.reference_epoch, false) AS rolling_copy,
           x.sealed_epoch,
           se.creation_time AS sealed_time,
           sz.size AS sealed_size_bytes,
           d.segment_key IS NOT NULL AS deleted_by_truncation
    FROM segments x
    LEFT JOIN epochs ce ON ce.stream_id = x.stream_id AND ce.epoch = x.creation_epoch
    LEFT JOIN epochs se ON se.stream_id = x.stream_id AND se.epoch = x.sealed_epoch
    LEFT JOIN (
        SELECT z.stream_id, z.shard, kv.key AS segment_key, kv.value::bigint AS size
        FROM sealed_size_shards z CROSS JOIN LATERAL jsonb_each_text(z.sizes) kv
    ) sz ON sz.stream_id = x.stream_id AND sz.shard = x.creation_epoch / 1000
        AND sz.segment_key = x.segment_id::text
    LEFT JOIN (
        SELECT DISTINCT u.segment_id::text AS segment_key
        FROM stream_truncations t
        CROSS JOIN LATERAL unnest(
            t.deleted_segments || CASE WHEN t.updating THEN '{}'::bigint[] ELSE t.to_delete END
        ) AS u(segment_id)
        WHERE t.stream_id = s.id
    ) d ON d.segment_key = x.segment_id::text
    WHERE x.stream_id = s.id
) g;
