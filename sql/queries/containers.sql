-- Segment-store hosts and the container -> host map getURI answers from.
-- Each block's name is the store method that runs it.

-- name: register_host
-- $4: the first heartbeat of a store that heartbeats; NULL for an operator's registration.
INSERT INTO segment_store_hosts (host, port, registered_at, heartbeat_at) VALUES ($1, $2, $3, $4)
ON CONFLICT (host, port) DO NOTHING
RETURNING version;

-- name: get_host
SELECT host, port, registered_at, version, heartbeat_at FROM segment_store_hosts
WHERE host = $1 AND port = $2;

-- name: heartbeat_host
-- Conditional on the version the store last wrote or read: no row means the leader removed it
-- (or someone else wrote it), and the store registers afresh.
UPDATE segment_store_hosts SET heartbeat_at = $3, version = version + 1
WHERE host = $1 AND port = $2 AND version = $4
RETURNING version;

-- name: remove_hosts
-- Each host at the version the leader judged it expired by: a heartbeat landing meanwhile
-- bumps the version and keeps the host.
DELETE FROM segment_store_hosts h
USING unnest($1::text[], $2::int[], $3::bigint[]) AS d(host, port, expected)
WHERE h.host = d.host AND h.port = d.port AND h.version = d.expected
RETURNING h.host, h.port;

-- name: deregister_host
DELETE FROM segment_store_hosts WHERE host = $1 AND port = $2 AND version = $3
RETURNING host;

-- name: list_hosts
SELECT host, port, registered_at, version, heartbeat_at FROM segment_store_hosts ORDER BY host, port;

-- name: read_container_map
SELECT container, host, port, version FROM container_map ORDER BY container;

-- name: update_container_rows
-- Every row the writer read is presented at its version, changed or not, so a concurrent
-- change to any of them fails the whole replacement; only rows whose owner changes get a new
-- version.
UPDATE container_map c
SET host = w.host, port = w.port,
    version = c.version + CASE WHEN (c.host, c.port) IS DISTINCT FROM (w.host, w.port) THEN 1 ELSE 0 END
FROM unnest($1::int[], $2::text[], $3::int[], $4::bigint[]) AS w(container, host, port, expected)
WHERE c.container = w.container AND c.version = w.expected
RETURNING c.container;

-- name: insert_container_rows
INSERT INTO container_map (container, host, port)
SELECT container, host, port FROM unnest($1::int[], $2::text[], $3::int[]) AS w(container, host, port)
ON CONFLICT (container) DO NOTHING
RETURNING container;

-- name: delete_container_rows
DELETE FROM container_map c
USING unnest($1::int[], $2::bigint[]) AS d(container, expected)
WHERE c.container = d.container AND c.version = d.expected
RETURNING c.container;

-- name: count_unexpected_container_rows
-- Rows the writer never read (another writer added them): its view of the map was stale.
SELECT count(*) FROM container_map WHERE NOT (container = ANY($1::int[]));
