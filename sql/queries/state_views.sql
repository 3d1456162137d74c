-- Customized state views (after Helix): participants' states, the aggregation config, and the
-- views the leader aggregates. Each block's name is the store method (or its step) that runs it.
-- A participant's record (participant_resources) carries the version; its partition rows are
-- only inserted or deleted, always after the record's version moved in the same transaction.
-- Triggers (migration 0010) log every partition row change into state_changes.

-- name: resource_version
SELECT version FROM participant_resources WHERE participant = $1 AND state_name = $2 AND resource = $3;

-- name: create_resource
-- No row: a concurrent report created the record first.
INSERT INTO participant_resources (participant, state_name, resource, updated_at) VALUES ($1, $2, $3, $4)
ON CONFLICT (participant, state_name, resource) DO NOTHING
RETURNING version;

-- name: touch_resource
UPDATE participant_resources SET version = version + 1, updated_at = $4
WHERE participant = $1 AND state_name = $2 AND resource = $3 AND version = $5
RETURNING version;

-- name: delete_resource
-- The last partition is gone: so is the record (at the version this transaction gave it).
DELETE FROM participant_resources
WHERE participant = $1 AND state_name = $2 AND resource = $3 AND version = $4
RETURNING version;

-- name: delete_replaced_states
-- A whole-resource report: rows not in the new map, or with another state, go. NOT IN over the
-- new map runs as a hashed subplan whatever the table's statistics say (NOT EXISTS became a
-- nested loop of 1,000 x 1,000 comparisons while they were stale after a bulk load).
DELETE FROM participant_states s
WHERE s.participant = $1 AND s.state_name = $2 AND s.resource = $3
  AND (s.partition, s.state) NOT IN (
      SELECT n.partition, n.state FROM unnest($4::text[], $5::text[]) AS n(partition, state)
  )
RETURNING s.partition;

-- name: delete_patched_states
-- A merge: the named partitions whose state differs from the new one (NULL: removed) go.
DELETE FROM participant_states s
USING unnest($4::text[], $5::text[]) AS n(partition, state)
WHERE s.participant = $1 AND s.state_name = $2 AND s.resource = $3
  AND s.partition = n.partition AND s.state IS DISTINCT FROM n.state
RETURNING s.partition;

-- name: insert_states
-- After the delete, the rows left are exactly the unchanged ones: they conflict and stay.
INSERT INTO participant_states (participant, state_name, resource, partition, state, updated_at)
SELECT $1, $2, $3, n.partition, n.state, $6
FROM unnest($4::text[], $5::text[]) AS n(partition, state)
ON CONFLICT (participant, state_name, resource, partition) DO NOTHING
RETURNING partition;

-- name: count_states
SELECT count(*) FROM participant_states WHERE participant = $1 AND state_name = $2 AND resource = $3;

-- name: participant_states
-- A participant's records, optionally of one state name and/or resource, with their partitions
-- as parallel arrays ordered by partition.
SELECT r.state_name, r.resource, r.version, r.updated_at,
       coalesce(p.partitions, '{}') AS partitions, coalesce(p.states, '{}') AS states
FROM participant_resources r
LEFT JOIN LATERAL (
    SELECT array_agg(s.partition ORDER BY s.partition) AS partitions,
           array_agg(s.state ORDER BY s.partition) AS states
    FROM participant_states s
    WHERE s.participant = r.participant AND s.state_name = r.state_name AND s.resource = r.resource
) p ON true
WHERE r.participant = $1
  AND ($2::text IS NULL OR r.state_name = $2)
  AND ($3::text IS NULL OR r.resource = $3)
ORDER BY r.state_name, r.resource;

-- name: participants
SELECT r.participant, count(*) AS resources, max(r.updated_at) AS last_report_at,
       (SELECT count(*) FROM participant_states s WHERE s.participant = r.participant) AS partitions
FROM participant_resources r
GROUP BY r.participant
ORDER BY r.participant;

-- name: participant_versions
SELECT state_name, resource, version FROM participant_resources WHERE participant = $1;

-- name: remove_participant_resources
-- Every record at the version read; a record that moved or appeared fails the removal.
DELETE FROM participant_resources r
USING unnest($2::text[], $3::text[], $4::bigint[]) AS d(state_name, resource, expected)
WHERE r.participant = $1 AND r.state_name = d.state_name AND r.resource = d.resource
  AND r.version = d.expected
RETURNING r.state_name;

-- name: remove_participant_states
DELETE FROM participant_states s
USING unnest($2::text[], $3::text[]) AS d(state_name, resource)
WHERE s.participant = $1 AND s.state_name = d.state_name AND s.resource = d.resource;

-- name: count_participant_resources
SELECT count(*) FROM participant_resources WHERE participant = $1;

-- name: get_config
SELECT state_names, version, updated_at FROM state_view_config WHERE id = 1;

-- name: set_config
UPDATE state_view_config SET state_names = $1, updated_at = $3, version = version + 1
WHERE id = 1 AND version = $2
RETURNING version;

-- name: list_views
SELECT v.state_name, v.resource, v.version, v.updated_at,
       (SELECT count(*) FROM customized_view_partitions p
        WHERE p.state_name = v.state_name AND p.resource = v.resource) AS partition_count
FROM customized_views v
WHERE $1::text IS NULL OR v.state_name = $1
ORDER BY v.state_name, v.resource;

-- name: get_view
-- One statement, so the partitions are those of the version returned.
SELECT v.version, v.updated_at, p.partition, p.states
FROM customized_views v
LEFT JOIN customized_view_partitions p ON p.state_name = v.state_name AND p.resource = v.resource
WHERE v.state_name = $1 AND v.resource = $2
ORDER BY p.partition;

-- name: view_version
SELECT version FROM customized_views WHERE state_name = $1 AND resource = $2;

-- --- the aggregator -------------------------------------------------------------------------

-- name: built_names
SELECT state_name FROM state_view_builds ORDER BY state_name;

-- name: take_changes
-- The oldest $1 entries, one row per partition. Entries are deleted by the batch that covers
-- them, never by a cursor: an entry committed late with a lower number is still found next time.
SELECT state_name, resource, partition, array_agg(seq ORDER BY seq) AS seqs
FROM (SELECT seq, state_name, resource, partition FROM state_changes ORDER BY seq LIMIT $1) c
GROUP BY state_name, resource, partition
ORDER BY min(seq);

-- name: partition_states
-- The fold, next to the data: each given partition's participant -> state object, as JSON text
-- (the aggregator passes it through to apply_aggregation unparsed). Partitions nobody reports
-- are absent.
-- One aggregate per partition over its index range: a GROUP BY over the join sorted (and
-- spilled) 100,000 rows for a 1,000-partition change.
SELECT k.state_name, k.resource, k.partition, f.states
FROM unnest($1::text[], $2::text[], $3::text[]) AS k(state_name, resource, partition)
CROSS JOIN LATERAL (
    SELECT jsonb_object_agg(s.participant, s.state)::text AS states
    FROM participant_states s
    WHERE s.partition = k.partition AND s.state_name = k.state_name AND s.resource = k.resource
) f
WHERE f.states IS NOT NULL;

-- name: name_states
-- The same fold over every stored state of one state name (a full build).
SELECT resource, partition, jsonb_object_agg(participant, state)::text AS states
FROM participant_states
WHERE state_name = $1
GROUP BY resource, partition;

-- name: view_versions
SELECT v.state_name, v.resource, v.version
FROM customized_views v
JOIN unnest($1::text[], $2::text[]) AS k(state_name, resource)
  ON k.state_name = v.state_name AND k.resource = v.resource;

-- name: views_of_names
SELECT state_name, resource, version FROM customized_views WHERE state_name = ANY($1::text[]);

-- name: hold_leader_term
-- The fence: the batch lands only under the leader term it was computed for. The row lock
-- holds off a new leader's election until the batch committed, so once a new term exists no
-- batch of the old one can land.
SELECT term FROM cluster_leader WHERE id = 1 AND term = $1 FOR SHARE;

-- name: lock_views
-- Each view at the version the batch read; a missing row means it moved or went.
SELECT v.state_name, v.resource
FROM customized_views v
JOIN unnest($1::text[], $2::text[], $3::bigint[]) AS e(state_name, resource, expected)
  ON e.state_name = v.state_name AND e.resource = v.resource AND v.version = e.expected
FOR UPDATE OF v;

-- name: drop_view_partitions
DELETE FROM customized_view_partitions WHERE state_name = ANY($1::text[])
RETURNING state_name, resource;

-- name: delete_view_partitions
-- Partitions whose aggregated states differ from the recomputed ones (NULL: nobody reports it).
DELETE FROM customized_view_partitions p
USING unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS n(state_name, resource, partition, states)
WHERE p.state_name = n.state_name AND p.resource = n.resource AND p.partition = n.partition
  AND p.states IS DISTINCT FROM n.states::jsonb
RETURNING p.state_name, p.resource;

-- name: delete_unlisted_view_partitions
-- A full build of one state name: partitions it did not list are stale.
DELETE FROM customized_view_partitions p
WHERE p.state_name = $1
  AND NOT EXISTS (
      SELECT 1 FROM unnest($2::text[], $3::text[]) AS n(resource, partition)
      WHERE n.resource = p.resource AND n.partition = p.partition
  )
RETURNING p.state_name, p.resource;

-- name: insert_view_partitions
INSERT INTO customized_view_partitions (state_name, resource, partition, states, updated_at)
SELECT n.state_name, n.resource, n.partition, n.states::jsonb, $5
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS n(state_name, resource, partition, states)
WHERE n.states IS NOT NULL
ON CONFLICT (state_name, resource, partition) DO NOTHING
RETURNING state_name, resource;

-- name: views_with_partitions
SELECT k.state_name, k.resource
FROM unnest($1::text[], $2::text[]) AS k(state_name, resource)
WHERE EXISTS (
    SELECT 1 FROM customized_view_partitions p
    WHERE p.state_name = k.state_name AND p.resource = k.resource
);

-- name: bump_views
UPDATE customized_views v SET version = nextval('customized_view_versions'), updated_at = $4
FROM unnest($1::text[], $2::text[], $3::bigint[]) AS e(state_name, resource, expected)
WHERE v.state_name = e.state_name AND v.resource = e.resource AND v.version = e.expected
RETURNING v.state_name, v.resource, v.version;

-- name: insert_views
INSERT INTO customized_views (state_name, resource, version, updated_at)
SELECT k.state_name, k.resource, nextval('customized_view_versions'), $3
FROM unnest($1::text[], $2::text[]) AS k(state_name, resource)
ON CONFLICT (state_name, resource) DO NOTHING
RETURNING state_name, resource, version;

-- name: delete_views
DELETE FROM customized_views v
USING unnest($1::text[], $2::text[], $3::bigint[]) AS e(state_name, resource, expected)
WHERE v.state_name = e.state_name AND v.resource = e.resource AND v.version = e.expected
RETURNING v.state_name, v.resource;

-- name: count_views_of_names
-- After a drop: a view of a dropped name that is still there was written by someone else.
SELECT count(*) FROM customized_views WHERE state_name = ANY($1::text[]);

-- name: consume_changes
DELETE FROM state_changes WHERE seq = ANY($1::bigint[]);

-- name: mark_built
INSERT INTO state_view_builds (state_name, built_at)
SELECT name, $2 FROM unnest($1::text[]) AS name
ON CONFLICT (state_name) DO NOTHING;

-- name: unmark_built
DELETE FROM state_view_builds WHERE state_name = ANY($1::text[]);
