-- The durable request queue and the per-stream fairness barrier.

-- name: insert_request
INSERT INTO requests (processor, kind, scope, stream, bucket, payload, created_at, trace_id)
VALUES ($1, $2, $3, $4, pgc_request_bucket($3, $4), $5, $6, $7)
RETURNING id;

-- name: pending_requests
-- Due or not: a postponed request still holds its place in its stream's order.
SELECT id, processor, kind, scope, stream, bucket, payload, created_at, not_before, attempts,
       started, last_error, version, parked_at, failures, trace_id
FROM requests
WHERE processor = $1 AND bucket = ANY($2::int[]) AND NOT (id = ANY($3::bigint[])) AND parked_at IS NULL
ORDER BY id
LIMIT $4;

-- name: pending_first_per_key
-- The oldest pending request of each key: for processors that run one request per key at a
-- time, so a long backlog of one stream never hides another stream's requests. A loose index
-- scan (requests_pending_by_key): `keys` steps from each stream with pending requests of the
-- processor to the next, one index descent each, and each key's first row in id order is one
-- more; no sort of the backlog. A key's bucket is a function of its name (pgc_request_bucket),
-- so the row `keys` finds tells the key's bucket; the oldest-row read checks it again.
WITH RECURSIVE keys AS (
    (SELECT scope, stream, bucket FROM requests
     WHERE processor = $1 AND parked_at IS NULL
     ORDER BY scope, stream
     LIMIT 1)
    UNION ALL
    SELECT step.scope, step.stream, step.bucket
    FROM keys CROSS JOIN LATERAL (
        SELECT r.scope, r.stream, r.bucket FROM requests r
        WHERE r.processor = $1 AND r.parked_at IS NULL AND (r.scope, r.stream) > (keys.scope, keys.stream)
        ORDER BY r.scope, r.stream
        LIMIT 1
    ) step
)
SELECT oldest.* FROM keys CROSS JOIN LATERAL (
    SELECT id, processor, kind, scope, stream, bucket, payload, created_at, not_before, attempts,
           started, last_error, version, parked_at, failures, trace_id
    FROM requests r
    WHERE r.processor = $1 AND r.scope = keys.scope AND r.stream = keys.stream AND r.parked_at IS NULL
      AND r.bucket = ANY($2::int[]) AND NOT (r.id = ANY($3::bigint[]))
    ORDER BY r.id
    LIMIT 1
) oldest
WHERE keys.bucket = ANY($2::int[])
ORDER BY oldest.id
LIMIT $4;

-- name: get_request
SELECT id, processor, kind, scope, stream, bucket, payload, created_at, not_before, attempts,
       started, last_error, version, parked_at, failures, trace_id
FROM requests WHERE id = $1;

-- name: list_requests
SELECT id, processor, kind, scope, stream, bucket, payload, created_at, not_before, attempts,
       started, last_error, version, parked_at, failures, trace_id
FROM requests WHERE id > $1 ORDER BY id LIMIT $2;

-- name: postpone_request
-- $5: whether this postponement follows a failure (counted towards the attempts cap).
UPDATE requests SET not_before = $2, attempts = attempts + 1, last_error = $3, version = version + 1,
       failures = failures + CASE WHEN $5::boolean THEN 1 ELSE 0 END
WHERE id = $1 AND version = $4
RETURNING version;

-- name: start_request
UPDATE requests SET started = true, version = version + 1
WHERE id = $1 AND version = $2
RETURNING version;

-- name: ack_request
DELETE FROM requests WHERE id = $1;

-- name: ack_request_fenced
DELETE FROM requests
WHERE id = $1
  AND EXISTS (SELECT 1 FROM bucket_owners WHERE service = $2 AND bucket = $3 AND generation = $4);

-- name: pending_ids_for_key
SELECT id FROM requests
WHERE processor = $1 AND scope = $2 AND stream = $3 AND parked_at IS NULL ORDER BY id;

-- name: ack_many
DELETE FROM requests WHERE id = ANY($1::bigint[]);

-- name: ack_many_fenced
DELETE FROM requests
WHERE id = ANY($1::bigint[])
  AND EXISTS (SELECT 1 FROM bucket_owners WHERE service = $2 AND bucket = $3 AND generation = $4);

-- name: pending_for_key
SELECT EXISTS (
    SELECT 1 FROM requests WHERE scope = $1 AND stream = $2 AND kind = $3 AND parked_at IS NULL
);

-- name: park_request_fenced
-- Fenced like an acknowledgement: a previous owner of the bucket parks nothing. $5: the error.
UPDATE requests SET parked_at = $6, last_error = $5, version = version + 1
WHERE id = $1 AND parked_at IS NULL
  AND EXISTS (SELECT 1 FROM bucket_owners WHERE service = $2 AND bucket = $3 AND generation = $4)
RETURNING version;

-- name: park_request
UPDATE requests SET parked_at = $3, last_error = $2, version = version + 1
WHERE id = $1 AND parked_at IS NULL
RETURNING version;

-- name: list_parked
SELECT id, processor, kind, scope, stream, bucket, payload, created_at, not_before, attempts,
       started, last_error, version, parked_at, failures, trace_id
FROM requests WHERE parked_at IS NOT NULL AND id > $1 ORDER BY id LIMIT $2;

-- name: parked_since
-- The latest request of a key and kind parked at or after $4 (what a waiting caller asks).
SELECT id, processor, kind, scope, stream, bucket, payload, created_at, not_before, attempts,
       started, last_error, version, parked_at, failures, trace_id
FROM requests
WHERE scope = $1 AND stream = $2 AND kind = $3 AND parked_at >= $4
ORDER BY id DESC LIMIT 1;

-- name: unpark_request
-- Back into its stream's queue, due now, with a fresh count of failures; the wake-up the insert
-- trigger would send is sent here (the dispatcher's poll would find it anyway).
WITH unparked AS (
    UPDATE requests SET parked_at = NULL, not_before = 0, failures = 0, started = false,
           version = version + 1
    WHERE id = $1 AND parked_at IS NOT NULL
    RETURNING version, processor, bucket, scope, stream
)
SELECT version, pg_notify('pgc_requests', processor || ':' || bucket::text || ':' || scope || '/' || stream)
FROM unparked;

-- name: drop_parked
DELETE FROM requests WHERE id = $1 AND parked_at IS NOT NULL RETURNING id;

-- name: get_waiting_processor
SELECT w.processor, w.version
FROM streams s JOIN stream_waiting_processors w ON w.stream_id = s.id
WHERE s.scope = $1 AND s.name = $2;

-- name: insert_waiting_processor
INSERT INTO stream_waiting_processors (stream_id, processor)
SELECT s.id, $3 FROM streams s WHERE s.scope = $1 AND s.name = $2
ON CONFLICT (stream_id) DO NOTHING
RETURNING version;

-- name: delete_waiting_processor
DELETE FROM stream_waiting_processors w USING streams s
WHERE w.stream_id = s.id AND s.scope = $1 AND s.name = $2 AND w.processor = $3 AND w.version = $4
RETURNING w.version;
