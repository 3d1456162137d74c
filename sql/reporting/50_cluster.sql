-- The controller cluster: its fixed settings, members, leader, bucket ownership and the
-- segment-container map.

CREATE VIEW reporting.cluster_settings AS
SELECT cs.request_buckets,
       cs.retention_buckets,
       cs.watermark_buckets,
       cs.container_count,
       cs.created_at AS creation_time
FROM cluster_settings cs;

CREATE VIEW reporting.controllers AS
SELECT c.id AS controller_id,
       c.host,
       c.grpc_port,
       c.rest_port,
       c.started_at,
       c.heartbeat_at,
       l.controller_id IS NOT NULL AS is_leader,
       l.term AS leader_term,
       l.since AS leader_since
FROM controllers c
LEFT JOIN cluster_leader l ON l.id = 1 AND l.controller_id = c.id;

CREATE VIEW reporting.bucket_owners AS
SELECT b.service,
       b.bucket,
       b.assigned_to,
       b.owner,
       b.generation,
       b.claimed_at
FROM bucket_owners b;

CREATE VIEW reporting.containers AS
SELECT m.container,
       m.host,
       m.port
FROM container_map m;

CREATE VIEW reporting.segment_store_hosts AS
SELECT h.host,
       h.port,
       h.registered_at,
       (SELECT count(*) FROM container_map m WHERE m.host = h.host AND m.port = h.port) AS container_count
FROM segment_store_hosts h;
