-- The cluster: settings, membership, leadership and bucket ownership.
-- Each block's name is the store method that runs it.

-- name: get_settings
SELECT request_buckets, retention_buckets, watermark_buckets, container_count, version
FROM cluster_settings WHERE id = 1;

-- name: configure_settings
-- Counts may change only while the cluster holds no stream: afterwards they are fixed, since
-- every stream's requests, retention and watermark work live in buckets of these counts.
UPDATE cluster_settings
SET request_buckets = $1, retention_buckets = $2, watermark_buckets = $3, container_count = $4,
    version = version + 1
WHERE id = 1 AND version = $5 AND NOT EXISTS (SELECT 1 FROM streams)
RETURNING version;

-- name: ensure_buckets
-- One row per bucket of the service; rows beyond the count exist only after a count change on
-- an empty cluster and are dropped with it.
WITH trimmed AS (DELETE FROM bucket_owners WHERE service = $1 AND bucket >= $2)
INSERT INTO bucket_owners (service, bucket)
SELECT $1, b FROM generate_series(0, $2 - 1) AS b
ON CONFLICT (service, bucket) DO NOTHING;

-- name: register_member
INSERT INTO controllers (id, host, grpc_port, rest_port, started_at, heartbeat_at)
VALUES ($1, $2, $3, $4, $5, $5)
ON CONFLICT (id) DO UPDATE
SET host = $2, grpc_port = $3, rest_port = $4, heartbeat_at = $5, version = controllers.version + 1
RETURNING version;

-- name: heartbeat
-- Only the member itself writes its row (at the version it last wrote); no row means the
-- leader removed it as dead, and the member registers again.
UPDATE controllers SET heartbeat_at = $2, version = version + 1
WHERE id = $1 AND version = $3
RETURNING version;

-- name: members
-- Live = heartbeat within the TTL and its lock session still connected: a killed process
-- drops out the moment PostgreSQL closes its session, without waiting for the TTL.
SELECT c.id, c.host, c.grpc_port, c.rest_port, c.started_at, c.heartbeat_at, c.version,
       (c.heartbeat_at >= $1::bigint - $2::bigint
        AND EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.application_name = 'pgc-member:' || c.id)) AS live
FROM controllers c
ORDER BY c.id;

-- name: remove_members
DELETE FROM controllers c
USING unnest($1::text[], $2::bigint[]) AS dead(id, version)
WHERE c.id = dead.id AND c.version = dead.version
RETURNING c.id;

-- name: get_leader
SELECT controller_id, term, since, version FROM cluster_leader WHERE id = 1;

-- name: set_leader
-- Written only by the holder of the leadership lock, at the version it read (NULL: first ever).
WITH first AS (
    INSERT INTO cluster_leader (id, controller_id, term, since)
    SELECT 1, $1, 1, $2 WHERE $3::bigint IS NULL
    ON CONFLICT (id) DO NOTHING
    RETURNING term, version
), later AS (
    UPDATE cluster_leader SET controller_id = $1, term = term + 1, since = $2, version = version + 1
    WHERE id = 1 AND version = $3
    RETURNING term, version
)
SELECT term, version FROM first UNION ALL SELECT term, version FROM later;

-- name: bucket_rows
SELECT service, bucket, assigned_to, owner, generation, version
FROM bucket_owners WHERE service = $1 ORDER BY bucket;

-- name: all_bucket_rows
SELECT service, bucket, assigned_to, owner, generation, version
FROM bucket_owners ORDER BY service, bucket;

-- name: assign_buckets
-- The leader's decision, each row at the version the leader read.
UPDATE bucket_owners b SET assigned_to = d.assignee, version = b.version + 1
FROM unnest($2::int[], $3::text[], $4::bigint[]) AS d(bucket, assignee, version)
WHERE b.service = $1 AND b.bucket = d.bucket AND b.version = d.version
RETURNING b.bucket;

-- name: claim_bucket
-- Run while holding the bucket's advisory lock: the new generation fences every earlier holder.
UPDATE bucket_owners SET owner = $3, generation = generation + 1, claimed_at = $4, version = version + 1
WHERE service = $1 AND bucket = $2 AND version = $5
RETURNING generation, version;

-- name: release_bucket
-- Conditional on the generation this owner claimed: a release never clears a newer claim.
UPDATE bucket_owners SET owner = NULL, version = version + 1
WHERE service = $1 AND bucket = $2 AND owner = $3 AND generation = $4
RETURNING version;

-- name: fence_holds
SELECT EXISTS (
    SELECT 1 FROM bucket_owners WHERE service = $1 AND bucket = $2 AND generation = $3
);
