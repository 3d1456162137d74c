-- The id a transaction is known by after its connection is gone (app/store/commit_outcome.py),
-- and the server it is known on. Taking the id assigns one to a transaction that has none yet, as
-- its first write would.
--
-- A transaction id means something only on the server and timeline that assigned it: a promoted
-- standby goes on from the ids it replayed, so the old primary's id for a transaction it ran after
-- the promotion is the new primary's id for another. `server` is the node's address and port
-- (NULL parts, over a Unix socket, are left out) and the timeline it writes on: a promotion starts
-- a new one, and a restart keeps both.

-- name: transaction_id
SELECT txid_current() AS xid,
       concat_ws(' ', inet_server_addr(), inet_server_port(),
                 CASE WHEN pg_is_in_recovery() THEN 'standby'
                      ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END) AS server;

-- name: transaction_status
-- 'committed', 'aborted' or 'in progress' when this is the server $2 named (NULL once the id is
-- too old for it to know); NULL on any other server, which is not asked: the id may be in its
-- future, which it refuses as an error.
SELECT CASE WHEN server = $2 THEN txid_status($1) END AS status, server
FROM (SELECT concat_ws(' ', inet_server_addr(), inet_server_port(),
                       CASE WHEN pg_is_in_recovery() THEN 'standby'
                            ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END) AS server) here;
