-- The id a transaction is known by after its connection is gone (app/store/commit_outcome.py).
-- Taking it assigns one to a transaction that has none yet, as its first write would.

-- name: transaction_id
SELECT txid_current();

-- name: transaction_status
-- 'committed', 'aborted' or 'in progress'; NULL once the id is too old for the server to know.
SELECT txid_status($1);
