-- Transactions: the active ones (OPEN, COMMITTING, ABORTING) and the completed ones the controller
-- still keeps (one to two TTL periods, `--txn-ttl-hours`), one row per transaction.

-- A completed record carries only its outcome and time: the rest comes from the details kept
-- when its active record was deleted (completed_txn_details, migration 0011), absent for
-- transactions completed before that migration. The request time is written by the move to
-- COMMITTING or ABORTING (migration 0012), and kept in the details at completion.
CREATE VIEW reporting.transactions AS
SELECT t.stream_id,
       s.scope,
       s.name AS stream,
       (lpad(to_hex(t.txn_high), 16, '0') || lpad(to_hex(t.txn_low), 16, '0'))::uuid AS txn_id,
       t.txn_high,
       t.txn_low,
       t.epoch,
       t.status,
       NULL::text AS outcome,
       t.creation_time,
       t.lease_ms,
       t.lease_expiry,
       t.max_exec_expiry,
       t.writer_id,
       t.commit_time AS writer_time,
       t.commit_order,
       t.requested_at,
       NULL::bigint AS completion_time,
       t.requested_at - t.creation_time AS open_duration_ms,
       NULL::bigint AS commit_latency_ms,
       NULL::bigint AS abort_latency_ms,
       CASE WHEN t.status = 'ABORTING' THEN t.requested_at >= t.lease_expiry END AS timed_out
FROM transactions t
JOIN streams s ON s.id = t.stream_id
UNION ALL
SELECT c.stream_id,
       s.scope,
       s.name AS stream,
       (lpad(to_hex(c.txn_high), 16, '0') || lpad(to_hex(c.txn_low), 16, '0'))::uuid AS txn_id,
       c.txn_high,
       c.txn_low,
       (c.txn_high >> 32)::integer AS epoch,
       c.status,
       c.status AS outcome,
       d.creation_time,
       d.lease_ms,
       d.lease_expiry,
       d.max_exec_expiry,
       d.writer_id,
       d.commit_time AS writer_time,
       d.commit_order,
       d.requested_at,
       c.completion_time,
       d.requested_at - d.creation_time AS open_duration_ms,
       CASE WHEN c.status = 'COMMITTED' THEN c.completion_time - d.requested_at END AS commit_latency_ms,
       CASE WHEN c.status = 'ABORTED' THEN c.completion_time - d.requested_at END AS abort_latency_ms,
       CASE WHEN c.status = 'ABORTED' THEN d.requested_at >= d.lease_expiry END AS timed_out
FROM completed_txns c
JOIN streams s ON s.id = c.stream_id
LEFT JOIN completed_txn_details d
  ON d.stream_id = c.stream_id AND d.txn_high = c.txn_high AND d.txn_low = c.txn_low;
