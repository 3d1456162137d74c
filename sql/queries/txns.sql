-- Transactions: active records, the commit batch in progress, completed records.
-- Every update and delete of a mutable row is conditional on the version the caller read.

-- name: create_txn
-- The id's low half comes from the global counter; refused (no row) while SEALING/SEALED.
-- The epoch is $3, or ($3 NULL) the current epoch's reference epoch, read here with the state.
-- Also answers the stream's id, state and rollover size, so creation needs no other read.
-- The state row is share-locked: a move to SEALING waits for this insert to commit (so the
-- seal's workflow finds the transaction and aborts it), or this insert sees SEALING and refuses;
-- no transaction is left OPEN on a stream sealed after it looked.
WITH target AS (
    SELECT s.id, s.name_hash, st.state, c.rollover_size_bytes,
           COALESCE($3::int, (
               SELECT e.reference_epoch FROM stream_current_epochs ce
               JOIN epochs e ON e.stream_id = ce.stream_id AND e.epoch = ce.epoch
               WHERE ce.stream_id = s.id
           )) AS epoch
    FROM streams s
    JOIN stream_states st ON st.stream_id = s.id
    JOIN stream_configs c ON c.stream_id = s.id
    WHERE s.scope = $1 AND s.name = $2
    FOR SHARE OF st
), created AS (
    INSERT INTO transactions (stream_id, txn_high, txn_low, epoch, bucket, status, creation_time,
                              lease_ms, lease_expiry, max_exec_expiry)
    SELECT id, epoch::bigint << 32, nextval('txn_counter'), epoch,
           (name_hash & 2147483647) % (SELECT request_buckets FROM cluster_settings WHERE id = 1),
           'OPEN', $4::bigint, $5::bigint, $4::bigint + $5::bigint, $6::bigint
    FROM target WHERE state NOT IN ('SEALING', 'SEALED')
    RETURNING txn_high, txn_low
)
SELECT t.id AS stream_id, t.epoch, t.state, t.rollover_size_bytes, c.txn_high, c.txn_low
FROM target t LEFT JOIN created c ON true;

-- name: create_txns
-- create_txn for many callers of one loop turn: one statement, each caller's row answered under
-- its ordinal (1-based) with the same columns, so each gets its own outcome: no stream_id (no
-- such stream), or no txn_low (SEALING/SEALED). The streams' state rows are share-locked in id
-- order (two batches never wait on each other in a cycle), with the same effect as create_txn's
-- lock on a concurrent seal. Ids are drawn in a materialized row set before the insert, so the
-- answer can name each caller's id without relying on the insert's RETURNING order.
WITH asked AS MATERIALIZED (
    SELECT a.scope, a.name, a.epoch, a.now_ms, a.lease_ms, a.max_exec_expiry, a.ord
    FROM unnest($1::text[], $2::text[], $3::int[], $4::bigint[], $5::bigint[], $6::bigint[])
        WITH ORDINALITY AS a(scope, name, epoch, now_ms, lease_ms, max_exec_expiry, ord)
), target AS MATERIALIZED (
    SELECT s.id, s.scope, s.name, s.name_hash, st.state, c.rollover_size_bytes,
           (SELECT e.reference_epoch FROM stream_current_epochs ce
            JOIN epochs e ON e.stream_id = ce.stream_id AND e.epoch = ce.epoch
            WHERE ce.stream_id = s.id) AS reference_epoch
    FROM streams s
    JOIN stream_states st ON st.stream_id = s.id
    JOIN stream_configs c ON c.stream_id = s.id
    WHERE (s.scope, s.name) IN (SELECT scope, name FROM asked)
    ORDER BY s.id
    FOR SHARE OF st
), drawn AS MATERIALIZED (
    SELECT a.ord, t.id AS stream_id, COALESCE(a.epoch, t.reference_epoch) AS epoch,
           nextval('txn_counter') AS txn_low,
           (t.name_hash & 2147483647) % (SELECT request_buckets FROM cluster_settings WHERE id = 1) AS bucket,
           a.now_ms, a.lease_ms, a.max_exec_expiry
    FROM asked a JOIN target t ON t.scope = a.scope AND t.name = a.name
    WHERE t.state NOT IN ('SEALING', 'SEALED')
    ORDER BY a.ord
), created AS (
    INSERT INTO transactions (stream_id, txn_high, txn_low, epoch, bucket, status, creation_time,
                              lease_ms, lease_expiry, max_exec_expiry)
    SELECT stream_id, epoch::bigint << 32, txn_low, epoch, bucket,
           'OPEN', now_ms, lease_ms, now_ms + lease_ms, max_exec_expiry
    FROM drawn
)
SELECT a.ord, t.id AS stream_id, COALESCE(a.epoch, t.reference_epoch) AS epoch, t.state,
       t.rollover_size_bytes, d.epoch::bigint << 32 AS txn_high, d.txn_low
FROM asked a
LEFT JOIN target t ON t.scope = a.scope AND t.name = a.name
LEFT JOIN drawn d ON d.ord = a.ord;

-- name: get_txns
-- get_txn for many callers of one loop turn: one row per ordinal (1-based) whose stream exists.
-- Each read's whole key (stream id, id halves) comes from one materialized row, so both probes are
-- primary-key lookups: joined straight to the unnest, a plan made on the statistics of a freshly
-- filled completed_txns walked every completed transaction of the stream for each read (its
-- index by time, the id halves as a filter; 2,000 buffers a call after 15 s of 8 clients).
WITH asked AS MATERIALIZED (
    SELECT a.ord, s.id AS stream_id, a.txn_high, a.txn_low
    FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[]) WITH ORDINALITY AS a(scope, name, txn_high, txn_low, ord)
    JOIN streams s ON s.scope = a.scope AND s.name = a.name
)
SELECT a.ord, a.stream_id, t.txn_high, t.txn_low, t.epoch, t.status, t.creation_time, t.lease_ms,
       t.lease_expiry, t.max_exec_expiry, t.writer_id, t.commit_time, t.commit_order, t.version,
       c.status AS completed_status, c.completion_time
FROM asked a
LEFT JOIN transactions t ON t.stream_id = a.stream_id AND t.txn_high = a.txn_high AND t.txn_low = a.txn_low
LEFT JOIN completed_txns c ON c.stream_id = a.stream_id AND c.txn_high = a.txn_high AND c.txn_low = a.txn_low;

-- name: get_txn
-- One row while the stream exists: the active record (if any) and the completed one (if any).
SELECT s.id AS stream_id, t.txn_high, t.txn_low, t.epoch, t.status, t.creation_time, t.lease_ms,
       t.lease_expiry, t.max_exec_expiry, t.writer_id, t.commit_time, t.commit_order, t.version,
       c.status AS completed_status, c.completion_time
FROM streams s
LEFT JOIN transactions t ON t.stream_id = s.id AND t.txn_high = $3 AND t.txn_low = $4
LEFT JOIN completed_txns c ON c.stream_id = s.id AND c.txn_high = $3 AND c.txn_low = $4
WHERE s.scope = $1 AND s.name = $2;

-- name: extend_lease
-- Found by key alone and updated by row id, for the reason move_txn gives.
WITH found AS MATERIALIZED (
    SELECT t.ctid AS row_id
    FROM transactions t
    WHERE t.stream_id = (SELECT id FROM streams WHERE scope = $1 AND name = $2)
      AND t.txn_high = $3 AND t.txn_low = $4
)
UPDATE transactions t SET lease_expiry = $5, lease_ms = $6, version = t.version + 1
FROM found f
WHERE t.ctid = f.row_id AND t.txn_high = $3 AND t.txn_low = $4
  AND t.version = $7 AND t.status = 'OPEN'
RETURNING t.version;

-- name: extend_open_lease
-- A ping's common case in one statement: extends the lease of an OPEN transaction when the
-- new lease is within the maximum ($7) and within the maximum execution time. The
-- conditions mirror app/domain/txns.py ping_decision. Found by key alone and updated by row id,
-- for the reason move_txn gives; whatever is updated is rechecked against these conditions, so a
-- concurrent change (a commit, an abort) is never overwritten. No row: the caller reads the
-- record and answers from the rules.
WITH found AS MATERIALIZED (
    SELECT t.ctid AS row_id
    FROM transactions t
    WHERE t.stream_id = (SELECT id FROM streams WHERE scope = $1 AND name = $2)
      AND t.txn_high = $3 AND t.txn_low = $4
)
UPDATE transactions t SET lease_expiry = $5::bigint + $6::bigint, lease_ms = $6, version = t.version + 1
FROM found f
WHERE t.ctid = f.row_id AND t.txn_high = $3 AND t.txn_low = $4
  AND t.status = 'OPEN' AND $6::bigint <= $7::bigint AND $5::bigint + $6::bigint <= t.max_exec_expiry
RETURNING t.version;

-- name: extend_open_leases
-- extend_open_lease for many pings of one loop turn: one statement, the same conditions per
-- ping. Answers the ordinal (1-based) of each ping that extended its lease, and the expiry it
-- set; a ping whose transaction is pinged twice in the batch updates the row once, and the one
-- that lost is answered by the lease the other set when that reaches as far as it asked.
-- Each ping's whole key (stream id, id halves) comes from one materialized row, so every probe
-- of transactions is a primary-key lookup, whatever the statistics of a freshly filled table say.
WITH asked AS MATERIALIZED (
    SELECT s.id AS stream_id, a.txn_high, a.txn_low, a.now_ms, a.lease_ms, a.max_lease_ms, a.ord
    FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[])
        WITH ORDINALITY AS a(scope, name, txn_high, txn_low, now_ms, lease_ms, max_lease_ms, ord)
    JOIN streams s ON s.scope = a.scope AND s.name = a.name
    WHERE a.lease_ms <= a.max_lease_ms
)
UPDATE transactions t
SET lease_expiry = a.now_ms + a.lease_ms, lease_ms = a.lease_ms, version = t.version + 1
FROM asked a
WHERE (t.stream_id, t.txn_high, t.txn_low) = (a.stream_id, a.txn_high, a.txn_low)
  AND t.status = 'OPEN' AND a.now_ms + a.lease_ms <= t.max_exec_expiry
RETURNING a.ord, t.lease_expiry;

-- name: move_txn
-- OPEN -> COMMITTING (taking the next commit-order position) or ABORTING, and the request
-- that completes it, in one statement: the status and its work commit together. At version $6,
-- or ($6 NULL) at whatever version the OPEN row has when this statement updates it.
-- The row is found by its key alone and updated by its row id, the status checked there: with the
-- status among the lookup's conditions, the planner may take the partial index of OPEN
-- transactions, whose statistics say it is tiny while it holds a dead entry for every
-- transaction that left OPEN since the last vacuum, and walk them all for each move. A row that a
-- concurrent statement changed meanwhile may go un-updated (this statement's snapshot does not see
-- its new version; whatever is updated is rechecked against every condition here): then no row,
-- and the caller reads the record and decides, as for any no row.
WITH found AS MATERIALIZED (
    SELECT t.ctid AS row_id
    FROM transactions t
    WHERE t.stream_id = (SELECT id FROM streams WHERE scope = $1 AND name = $2)
      AND t.txn_high = $3 AND t.txn_low = $4
),
moved AS (
    UPDATE transactions t
    SET status = $5::text, version = t.version + 1,
        writer_id = COALESCE($7, t.writer_id),
        commit_time = COALESCE($8, t.commit_time),
        commit_order = CASE WHEN $5::text = 'COMMITTING' THEN nextval('txn_commit_order') ELSE t.commit_order END,
        requested_at = $11::bigint
    FROM found f
    WHERE t.ctid = f.row_id AND t.txn_high = $3 AND t.txn_low = $4
      AND ($6::bigint IS NULL OR t.version = $6) AND t.status = 'OPEN'
    RETURNING t.version
), queued AS (
    INSERT INTO requests (processor, kind, scope, stream, bucket, payload, created_at)
    SELECT $9, $10, $1, $2, pgc_request_bucket($1, $2),
           jsonb_build_object('txn_high', $3::bigint, 'txn_low', $4::bigint), $11
    FROM moved
)
SELECT version FROM moved;

-- name: move_open_txns
-- move_txn of OPEN transactions ($6 NULL) for many commitTransaction/abortTransaction calls of
-- one loop turn: one statement and one commit for all of them, each moved row with its own
-- request, as move_txn does. Answers the ordinal (1-based) and new version of each moved call;
-- a call whose transaction is not OPEN (or named twice in the batch: the first ordinal wins)
-- has no row, and its caller reads the record and decides, as after move_txn. The rows are
-- locked in key order (two batches never wait on each other in a cycle) and updated by the
-- locked version's row id, so each update is a direct fetch whatever the statistics say; commit-order
-- positions are drawn in ordinal order: the order the calls arrived in.
WITH asked AS MATERIALIZED (
    SELECT s.id AS stream_id, a.scope, a.name, a.txn_high, a.txn_low, a.status, a.writer_id,
           a.commit_time, a.processor, a.kind, a.requested_at, a.ord
    FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::text[], $7::bigint[],
                $8::text[], $9::text[], $10::bigint[])
        WITH ORDINALITY AS a(scope, name, txn_high, txn_low, status, writer_id, commit_time, processor,
                             kind, requested_at, ord)
    JOIN streams s ON s.scope = a.scope AND s.name = a.name
), locked AS MATERIALIZED (
    -- By key alone (the status is checked on the locked version below): a status condition
    -- here would let a generic plan scan the stream's open transactions instead.
    SELECT t.ctid AS row_id, t.stream_id, t.txn_high, t.txn_low, t.status
    FROM transactions t
    JOIN asked a ON (t.stream_id, t.txn_high, t.txn_low) = (a.stream_id, a.txn_high, a.txn_low)
    ORDER BY t.stream_id, t.txn_high, t.txn_low
    FOR UPDATE OF t
), winners AS MATERIALIZED (
    SELECT DISTINCT ON (a.stream_id, a.txn_high, a.txn_low) a.*, l.row_id
    FROM asked a JOIN locked l USING (stream_id, txn_high, txn_low)
    WHERE l.status = 'OPEN'
    ORDER BY a.stream_id, a.txn_high, a.txn_low, a.ord
), drawn AS MATERIALIZED (
    SELECT w.*, CASE WHEN w.status = 'COMMITTING' THEN nextval('txn_commit_order') END AS commit_order
    FROM winners w
    ORDER BY w.ord
), moved AS (
    UPDATE transactions t
    SET status = d.status, version = t.version + 1,
        writer_id = COALESCE(d.writer_id, t.writer_id),
        commit_time = COALESCE(d.commit_time, t.commit_time),
        commit_order = COALESCE(d.commit_order, t.commit_order),
        requested_at = d.requested_at
    FROM drawn d
    WHERE t.ctid = d.row_id
      AND (t.stream_id, t.txn_high, t.txn_low) = (d.stream_id, d.txn_high, d.txn_low) AND t.status = 'OPEN'
    RETURNING d.ord, t.version, d.scope, d.name, d.txn_high, d.txn_low, d.processor, d.kind, d.requested_at
), queued AS (
    INSERT INTO requests (processor, kind, scope, stream, bucket, payload, created_at)
    SELECT processor, kind, scope, name, pgc_request_bucket(scope, name),
           jsonb_build_object('txn_high', txn_high, 'txn_low', txn_low), requested_at
    FROM moved
    ORDER BY ord
)
SELECT ord, version FROM moved;

-- name: complete_abort
WITH target AS (SELECT id FROM streams WHERE scope = $1 AND name = $2),
gone AS (
    DELETE FROM transactions t USING target
    WHERE t.stream_id = target.id AND t.txn_high = $3 AND t.txn_low = $4 AND t.version = $5
      AND t.status = 'ABORTING'
    RETURNING t.stream_id, t.txn_high, t.txn_low, t.epoch, t.creation_time, t.lease_ms, t.lease_expiry,
              t.max_exec_expiry, t.writer_id, t.commit_time, t.commit_order, t.requested_at
), done AS (
    INSERT INTO completed_txns (stream_id, txn_high, txn_low, status, completion_time)
    SELECT stream_id, txn_high, txn_low, 'ABORTED', $6 FROM gone
    ON CONFLICT DO NOTHING
    RETURNING stream_id, txn_high, txn_low
), kept AS (
    -- What analysts need of the active record (reporting.transactions), kept beside the
    -- completed record; skipped with it when the completed record exists already.
    INSERT INTO completed_txn_details (stream_id, txn_high, txn_low, epoch, creation_time, lease_ms,
        lease_expiry, max_exec_expiry, writer_id, commit_time, commit_order, requested_at)
    SELECT g.stream_id, g.txn_high, g.txn_low, g.epoch, g.creation_time, g.lease_ms, g.lease_expiry,
           g.max_exec_expiry, g.writer_id, g.commit_time, g.commit_order, g.requested_at
    FROM gone g JOIN done d USING (stream_id, txn_high, txn_low)
)
SELECT count(*) FROM gone;

-- name: list_active
SELECT t.txn_high, t.txn_low, t.epoch, t.status, t.creation_time, t.lease_ms, t.lease_expiry,
       t.max_exec_expiry, t.writer_id, t.commit_time, t.commit_order, t.version
FROM streams s JOIN transactions t ON t.stream_id = s.id
WHERE s.scope = $1 AND s.name = $2
ORDER BY t.creation_time, t.txn_low;

-- name: list_completed
-- The most recently completed first.
SELECT c.txn_high, c.txn_low, c.status, c.completion_time
FROM streams s JOIN completed_txns c ON c.stream_id = s.id
WHERE s.scope = $1 AND s.name = $2
ORDER BY c.completion_time DESC, c.txn_low DESC
LIMIT $3;

-- name: stream_exists
SELECT EXISTS (SELECT 1 FROM streams WHERE scope = $1 AND name = $2);

-- name: get_committing
SELECT s.id AS stream_id, c.epoch, c.txn_highs, c.txn_lows, c.rolling_active_epoch, c.version
FROM streams s LEFT JOIN committing_txns c ON c.stream_id = s.id
WHERE s.scope = $1 AND s.name = $2;

-- name: next_commit_batch
-- The lowest epoch with committing transactions, up to $3 of them in commit-request order.
-- The lowest epoch is a scalar subquery, evaluated once (as a join it was re-evaluated per
-- row: quadratic in the committing transactions).
WITH target AS (SELECT id FROM streams WHERE scope = $1 AND name = $2)
SELECT t.txn_high, t.txn_low, t.epoch
FROM transactions t JOIN target ON t.stream_id = target.id
WHERE t.status = 'COMMITTING'
  AND t.epoch = (
      SELECT min(c.epoch) FROM transactions c JOIN target ON c.stream_id = target.id
      WHERE c.status = 'COMMITTING'
  )
ORDER BY t.commit_order
LIMIT $3;

-- name: start_commit_batch
-- Writes the batch into an empty record: created on first use ($6 NULL), else at version $6.
WITH target AS (SELECT id FROM streams WHERE scope = $1 AND name = $2),
created AS (
    INSERT INTO committing_txns (stream_id, epoch, txn_highs, txn_lows)
    SELECT id, $3, $4, $5 FROM target WHERE $6::bigint IS NULL
    ON CONFLICT (stream_id) DO NOTHING
    RETURNING version
), updated AS (
    UPDATE committing_txns c
    SET epoch = $3, txn_highs = $4, txn_lows = $5, rolling_active_epoch = -1, version = c.version + 1
    FROM target
    WHERE c.stream_id = target.id AND c.version = $6 AND c.epoch = -1
    RETURNING c.version
)
SELECT version FROM created UNION ALL SELECT version FROM updated;

-- name: set_rolling_epoch
UPDATE committing_txns c SET rolling_active_epoch = $3, version = c.version + 1
FROM streams s
WHERE s.scope = $1 AND s.name = $2 AND c.stream_id = s.id AND c.version = $4 AND c.epoch >= 0
RETURNING c.version;

-- name: end_commit_batch
-- One metadata transaction per batch: the batch's transactions end as $6 (COMMITTED once merged,
-- ABORTED when the commit was parked after a final failure), completed records in, active
-- records out, the batch record emptied, and COMMITTING_TXN back to ACTIVE when $8 is true (a
-- parked commit: whatever the state's version) or $7 is the state version read (NULL: the state
-- stays). Nothing stays COMMITTING with no run left to finish it.
WITH target AS (SELECT id FROM streams WHERE scope = $1 AND name = $2),
emptied AS (
    UPDATE committing_txns c
    SET epoch = -1, txn_highs = '{}', txn_lows = '{}', rolling_active_epoch = -1, version = c.version + 1
    FROM target
    WHERE c.stream_id = target.id AND c.version = $3
    RETURNING c.version
), batch AS (
    -- Each of the batch's transactions found by its key alone, one primary-key lookup each: the
    -- LIMIT keeps the lookup per key, and the status is checked outside it, where the planner
    -- cannot use it to pick the COMMITTING rows' index. Joined as a whole (or with the status
    -- inside), the planner read every COMMITTING row of the stream per batch or per key (its
    -- statistics, taken while few were COMMITTING, expect one), so a batch cost more the longer
    -- the stream's backlog of committing transactions.
    SELECT x.stream_id, x.txn_high, x.txn_low, x.version
    FROM target, emptied, unnest($4::bigint[], $5::bigint[]) AS b(high, low)
    CROSS JOIN LATERAL (
        SELECT t.stream_id, t.txn_high, t.txn_low, t.version, t.status FROM transactions t
        WHERE t.stream_id = target.id AND t.txn_high = b.high AND t.txn_low = b.low
        LIMIT 1
    ) x
    WHERE x.status = 'COMMITTING'
), gone AS (
    -- At the version read above: a row changed since is left (the status check went with it).
    DELETE FROM transactions t USING batch
    WHERE t.stream_id = batch.stream_id AND t.txn_high = batch.txn_high AND t.txn_low = batch.txn_low
      AND t.version = batch.version
    RETURNING t.stream_id, t.txn_high, t.txn_low, t.epoch, t.creation_time, t.lease_ms, t.lease_expiry,
              t.max_exec_expiry, t.writer_id, t.commit_time, t.commit_order, t.requested_at
), done AS (
    INSERT INTO completed_txns (stream_id, txn_high, txn_low, status, completion_time)
    SELECT stream_id, txn_high, txn_low, $6::text, $9 FROM gone
    ON CONFLICT DO NOTHING
    RETURNING stream_id, txn_high, txn_low
), kept AS (
    -- What analysts need of the active record (reporting.transactions), kept beside the
    -- completed record; skipped with it when the completed record exists already.
    INSERT INTO completed_txn_details (stream_id, txn_high, txn_low, epoch, creation_time, lease_ms,
        lease_expiry, max_exec_expiry, writer_id, commit_time, commit_order, requested_at)
    SELECT g.stream_id, g.txn_high, g.txn_low, g.epoch, g.creation_time, g.lease_ms, g.lease_expiry,
           g.max_exec_expiry, g.writer_id, g.commit_time, g.commit_order, g.requested_at
    FROM gone g JOIN done d USING (stream_id, txn_high, txn_low)
), state AS (
    UPDATE stream_states s SET state = 'ACTIVE', version = s.version + 1
    FROM target, emptied
    WHERE s.stream_id = target.id AND s.state = 'COMMITTING_TXN' AND ($8 OR s.version = $7)
)
SELECT version FROM emptied;

-- name: expired
-- Open transactions of the given buckets whose lease ran out before $2, oldest first.
SELECT s.scope, s.name, t.txn_high, t.txn_low, t.version, t.lease_expiry
FROM transactions t JOIN streams s ON s.id = t.stream_id
WHERE t.bucket = ANY($1::int[]) AND t.status = 'OPEN' AND t.lease_expiry <= $2
ORDER BY t.lease_expiry
LIMIT $3;

-- name: next_expiry
SELECT min(lease_expiry) FROM transactions WHERE bucket = ANY($1::int[]) AND status = 'OPEN';

-- name: gc_completed
WITH gone AS (DELETE FROM completed_txns WHERE completion_time < $1 RETURNING 1)
SELECT count(*) FROM gone;
